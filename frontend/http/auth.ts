/**
 * API keys and CORS for the HTTP frontend.
 *
 * - `ApiKeySet` (pure): SHA-256 digests of the accepted keys; `matches` compares a presented
 *   key against every digest with `timingSafeEqual` and never stops early, so neither the
 *   position of a match nor the length of a guess shows in the response time.
 * - `presentedKey` (pure): `Authorization: Bearer KEY` or `x-api-key: KEY`.
 * - `checkAccess` (pure): the route policy. `/health` and `/live` are always open (probes
 *   carry no keys); `/metrics` needs a key unless `metricsAuth` is 'none'; the admin routes
 *   (`ADMIN_PATHS`: LoRA load/unload) need an admin key (`--admin-api-key`) once any key is
 *   set, and answer an inference key 401 "insufficient permissions"; every other route (including unknown ones, so a scan
 *   learns nothing) needs a key, inference or admin.
 * - `ApiKeyFile` (I/O): one key per line; re-read when it changes (fs.watch, plus a stat poll
 *   because watches miss editors that replace the file and network filesystems). A file that
 *   is missing or has no keys at start is a ConfigError; a bad re-read keeps the last keys.
 * - `corsHeaders` (pure): CORS is off unless origins are listed; then a listed Origin is
 *   echoed back and a preflight is answered.
 * - `callerScope` (pure): who the caller is, for state kept per key (stored responses).
 * The server calls `Authenticator.check` once per request, before routing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync, watch, type FSWatcher, type Stats } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { ConfigError } from '../../runtime/errors.js';
import { ApiError } from '../errors.js';

export const METRICS_AUTH_MODES = ['required', 'none'] as const;
export type MetricsAuth = (typeof METRICS_AUTH_MODES)[number];

/** Routes that never need a key: orchestrator probes. */
export const OPEN_PATHS: ReadonlySet<string> = new Set(['/health', '/live']);

/** How often the key file is stat-ed in case a watch event was missed. */
export const KEY_FILE_POLL_MS = 2000;

function digest(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

export class ApiKeySet {
  private readonly digests: readonly Buffer[];

  constructor(keys: readonly string[]) {
    this.digests = keys.map(digest);
  }

  get size(): number {
    return this.digests.length;
  }

  /** Constant-time in the key's content: every digest is compared, equal-length buffers. */
  matches(presented: string): boolean {
    const d = digest(presented);
    let found = false;
    for (const known of this.digests) found = timingSafeEqual(d, known) || found;
    return found;
  }
}

/** Keys from a key file's text: one per line; blank lines and `#` comments are skipped. */
export function parseKeyFile(text: string): string[] {
  const keys: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    const key = line.trim();
    if (key.length > 0 && !key.startsWith('#')) keys.push(key);
  }
  return keys;
}

/** `--api-key` / `TANDEM_API_KEY` values: each may be a comma-separated list. */
export function parseKeyList(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(',').map((k) => k.trim()).filter((k) => k.length > 0)];
}

/** The key a request presents: `Authorization: Bearer KEY`, else `x-api-key`. */
export function presentedKey(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (auth !== undefined) {
    const match = /^bearer[ \t]+(.+)$/i.exec(auth.trim());
    if (match) return match[1]!.trim();
  }
  const header = headers['x-api-key'];
  const value = Array.isArray(header) ? header[0] : header;
  return value !== undefined && value.length > 0 ? value.trim() : undefined;
}

export interface AccessPolicy {
  /** The accepted keys now (a key file swaps them); undefined = authentication off. */
  keys(): ApiKeySet | undefined;
  metricsAuth: MetricsAuth;
  /** `--admin-api-key`: the only keys the admin routes accept; also accepted on every other route. */
  adminKeys?: ApiKeySet;
}

/**
 * Routes that change what the fleet serves (load an adapter from a path on the workers' hosts):
 * with any key configured, they need an admin key; an inference key gets 401.
 */
export const ADMIN_PATHS: ReadonlySet<string> = new Set(['/v1/load_lora_adapter', '/v1/unload_lora_adapter']);

const MISSING_KEY = "You didn't provide an API key. Provide it as 'Authorization: Bearer YOUR_KEY' or 'x-api-key: YOUR_KEY'.";

/** undefined when the request may proceed; otherwise the 401 to send. */
export function checkAccess(policy: AccessPolicy, path: string, headers: IncomingHttpHeaders): ApiError | undefined {
  const keys = policy.keys();
  const admin = policy.adminKeys;
  if (ADMIN_PATHS.has(path)) return checkAdmin(keys, admin, headers);
  if (keys === undefined || OPEN_PATHS.has(path)) return undefined;
  if (path === '/metrics' && policy.metricsAuth === 'none') return undefined;
  const key = presentedKey(headers);
  if (key === undefined) return new ApiError('invalid_api_key', MISSING_KEY);
  // Never echo the key back, not even a prefix of it. Both sets are always compared (no early exit).
  const isAdmin = admin?.matches(key) ?? false;
  if (!keys.matches(key) && !isAdmin) return new ApiError('invalid_api_key', 'Incorrect API key provided.');
  return undefined;
}

/** Open when no key at all is configured (as every route then is); otherwise an admin key only. */
function checkAdmin(keys: ApiKeySet | undefined, admin: ApiKeySet | undefined, headers: IncomingHttpHeaders): ApiError | undefined {
  if (keys === undefined && admin === undefined) return undefined;
  const key = presentedKey(headers);
  if (key === undefined) return new ApiError('invalid_api_key', MISSING_KEY);
  const isAdmin = admin?.matches(key) ?? false;
  const isInference = keys?.matches(key) ?? false;
  if (isAdmin) return undefined;
  if (!isInference) return new ApiError('invalid_api_key', 'Incorrect API key provided.');
  // 401 as OpenAI answers a restricted key that lacks a scope ("insufficient permissions").
  return new ApiError(
    'invalid_api_key',
    admin !== undefined
      ? 'You have insufficient permissions for this operation: loading and unloading adapters needs an admin key (--admin-api-key).'
      : 'You have insufficient permissions for this operation: loading and unloading adapters at run time needs an admin key; start the frontend with --admin-api-key.',
  );
}

/** Headers sent with every 401, as RFC 6750 asks. */
export const UNAUTHORIZED_HEADERS: Readonly<Record<string, string>> = { 'www-authenticate': 'Bearer' };

/**
 * A key file, re-read on change. Reads are synchronous and small (a few keys); a re-read that
 * fails (the file is briefly missing while an editor replaces it) keeps the previous keys.
 */
export class ApiKeyFile {
  private current: ApiKeySet;
  private watcher: FSWatcher | undefined;
  private readonly poll: NodeJS.Timeout;
  private lastStat: string;

  private constructor(
    readonly path: string,
    keys: string[],
    stat: Stats,
    private readonly extraKeys: readonly string[],
    private readonly log: Logger | undefined,
    pollMs: number,
  ) {
    this.current = new ApiKeySet([...extraKeys, ...keys]);
    this.lastStat = statKey(stat);
    this.watchFile();
    this.poll = setInterval(() => this.checkForChange(), pollMs);
    this.poll.unref();
  }

  /**
   * Throws ConfigError when the file cannot be read or holds no keys. `extraKeys` (from
   * `--api-key`) are accepted alongside the file's.
   */
  static open(path: string, options: { extraKeys?: readonly string[]; log?: Logger; pollMs?: number } = {}): ApiKeyFile {
    let text: string;
    let stat: Stats;
    try {
      stat = statSync(path);
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new ConfigError(`--api-key-file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    const keys = parseKeyFile(text);
    if (keys.length === 0) throw new ConfigError(`--api-key-file ${path}: no keys in the file (one key per line)`);
    return new ApiKeyFile(path, keys, stat, options.extraKeys ?? [], options.log, options.pollMs ?? KEY_FILE_POLL_MS);
  }

  keys(): ApiKeySet {
    return this.current;
  }

  close(): void {
    clearInterval(this.poll);
    this.watcher?.close();
    this.watcher = undefined;
  }

  private watchFile(): void {
    try {
      this.watcher = watch(this.path, { persistent: false }, () => this.checkForChange());
      // A replaced or deleted file ends the watch; the poll re-arms it.
      this.watcher.on('error', () => {
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch {
      this.watcher = undefined;
    }
  }

  private checkForChange(): void {
    let stat: Stats;
    try {
      stat = statSync(this.path);
    } catch {
      return; // gone for now: keep the last keys until it is back
    }
    const key = statKey(stat);
    if (key === this.lastStat) return;
    let keys: string[];
    try {
      keys = parseKeyFile(readFileSync(this.path, 'utf8'));
    } catch (err) {
      this.log?.warn({ path: this.path, err }, 'could not re-read the API key file; keeping the previous keys');
      return;
    }
    this.lastStat = key;
    this.current = new ApiKeySet([...this.extraKeys, ...keys]);
    this.log?.info({ path: this.path, keys: keys.length }, 'API key file reloaded');
    // An editor that renames a new file into place leaves the old watch on a dead inode.
    this.watcher?.close();
    this.watchFile();
  }
}

function statKey(s: Stats): string {
  return `${s.ino}:${s.size}:${s.mtimeMs}`;
}

/** Accepted keys from flags (fixed) and a key file (live, the flags' keys included). */
export function keySource(staticKeys: readonly string[], file: ApiKeyFile | undefined): () => ApiKeySet | undefined {
  if (file !== undefined) return () => file.keys();
  const set = staticKeys.length > 0 ? new ApiKeySet(staticKeys) : undefined;
  return () => set;
}

/**
 * CORS response headers for a request from `origin`, or undefined when CORS does not apply
 * (off, no Origin, or an origin not listed: the browser then blocks the response).
 */
export function corsHeaders(allowed: ReadonlySet<string>, origin: string | undefined): Record<string, string> | undefined {
  if (allowed.size === 0 || origin === undefined) return undefined;
  if (!allowed.has(origin) && !allowed.has('*')) return undefined;
  return { 'access-control-allow-origin': allowed.has('*') ? '*' : origin, vary: 'Origin' };
}

/** Extra headers answering a preflight (OPTIONS with Access-Control-Request-Method). */
export const PREFLIGHT_HEADERS: Readonly<Record<string, string>> = {
  'access-control-allow-methods': 'GET, POST, OPTIONS',
  'access-control-allow-headers': 'authorization, content-type, x-api-key, x-worker-instance-id',
  'access-control-max-age': '600',
};

/**
 * Who the caller is, for state kept per caller (stored responses): a digest of the key it
 * presented (never the key), or '' for everyone when the frontend has no keys. Call it only on
 * a request `checkAccess` let through.
 */
export function callerScope(policy: AccessPolicy | undefined, headers: IncomingHttpHeaders): string {
  if (policy?.keys() === undefined) return '';
  const key = presentedKey(headers);
  return key === undefined ? '' : `key:${digest(key).toString('hex')}`;
}
