/**
 * Static files of the dashboard page, served by the frontend itself (no CDN: clusters may be
 * air-gapped). Two roots:
 *   - the page: `frontend/dashboard/page/` in the repository (the source tree; `npm run build`
 *     compiles TypeScript only, so both `tsx` runs and `dist/` runs read the page from the
 *     source tree), then `dist/frontend/dashboard/page/` for anything compiled there;
 *   - uPlot: `node_modules/uplot/dist/` (`uPlot.iife.min.js`, `uPlot.min.css`), found by
 *     module resolution so it works wherever node_modules is.
 * Files found are read once and kept (a few hundred KB); names are checked against a strict
 * pattern, so no path can leave a root.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Asset {
  body: Buffer;
  contentType: string;
  etag: string;
}

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.map': 'application/json',
};

/** Asset names: one path segment or a few, no dot segments, no odd characters. */
const SAFE_NAME = /^(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*\/){0,3}[A-Za-z0-9_-][A-Za-z0-9_.-]*$/;

/** uPlot files served under /dashboard/assets/ by these names. */
export const UPLOT_FILES = ['uPlot.iife.min.js', 'uPlot.min.css'] as const;

/** The repository root: the nearest ancestor holding package.json (source: frontend/dashboard; build: dist/frontend/dashboard). */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    dir = resolve(dir, '..');
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
}

function uplotDir(): string | undefined {
  try {
    return dirname(createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js'));
  } catch {
    return undefined;
  }
}

export class DashboardAssets {
  /** Hits only: a file added to page/ while the frontend runs is found on the next request. */
  private readonly cache = new Map<string, Asset>();
  readonly pageDirs: string[];
  private readonly uplot: string | undefined;

  constructor(pageDirs?: string[]) {
    const root = repoRoot();
    this.pageDirs = pageDirs ?? [join(root, 'frontend', 'dashboard', 'page'), join(root, 'dist', 'frontend', 'dashboard', 'page')];
    this.uplot = uplotDir();
  }

  /** `index.html` for `/dashboard`, else a name under `/dashboard/assets/`; undefined when not found. */
  get(name: string): Asset | undefined {
    if (!SAFE_NAME.test(name) || name.split('/').some((s) => s === '..' || s === '.')) return undefined;
    const cached = this.cache.get(name);
    if (cached !== undefined) return cached;
    const asset = this.load(name);
    if (asset !== undefined && this.cache.size < 256) this.cache.set(name, asset);
    return asset;
  }

  private load(name: string): Asset | undefined {
    const dirs = (UPLOT_FILES as readonly string[]).includes(name) && this.uplot ? [this.uplot, ...this.pageDirs] : this.pageDirs;
    for (const dir of dirs) {
      const path = join(dir, name);
      let body: Buffer;
      try {
        body = readFileSync(path);
      } catch {
        continue;
      }
      const contentType = CONTENT_TYPES[extname(name)] ?? 'application/octet-stream';
      // A weak validator is enough: files change only with a new build/process.
      const etag = `"${body.length.toString(16)}-${hash(body)}"`;
      return { body, contentType, etag };
    }
    return undefined;
  }
}

function hash(b: Buffer): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i]!, 0x01000193);
  return (h >>> 0).toString(16);
}
