/**
 * How to start a worker thread whose entry module sits beside the caller: the compiled `.js`
 * (dist/), or, when the caller itself runs from TypeScript source (tests, `tsx` benches), the
 * `.ts` through tsx's tsImport (on Node 20 `--import tsx` does not reach a worker's entry
 * module). Pass the result to `new Worker(entry.code, { eval: entry.eval })`.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface ThreadEntry {
  code: string | URL;
  eval: boolean;
}

/** `callerUrl`: the caller's import.meta.url; `name`: the entry module's file name without extension. */
export function threadEntry(callerUrl: string, name: string): ThreadEntry {
  if (!callerUrl.endsWith('.ts')) return { code: new URL(`./${name}.js`, callerUrl), eval: false };
  const require = createRequire(callerUrl);
  const manifest = require.resolve('tsx/package.json');
  const exports = (JSON.parse(readFileSync(manifest, 'utf8')) as { exports: Record<string, { import: { default: string } }> }).exports;
  const api = pathToFileURL(join(dirname(manifest), exports['./esm/api']!.import.default)).href;
  const entry = new URL(`./${name}.ts`, callerUrl).href;
  return { code: `import(${JSON.stringify(api)}).then((tsx) => tsx.tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}));`, eval: true };
}
