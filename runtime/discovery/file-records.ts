/**
 * On-disk layout of the file backend: one JSON file per key in a flat directory.
 *
 *   <dir>/v1%2Finstances%2Ftandem%2Fbackend%2Fgenerate%2F00c0ffee00c0ffee.json
 *   {"key": "...", "instanceId": "00c0ffee00c0ffee", "ttlSeconds": 10, "value": {...}}
 *
 * The file name is the key, percent-encoded, so listing a prefix is one `readdir`. The file's
 * mtime is the heartbeat: the owner touches it every TTL/3, and a reader treats a file whose
 * mtime is older than the writer's `ttlSeconds` as gone. Writes go to a dot-file and are
 * renamed into place, so a reader never sees half a record.
 */
import { randomBytes } from 'node:crypto';
import { readFile, readdir, rename, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { InstanceId } from '../../proto/wire.js';
import { TandemError } from '../errors.js';

export interface FileEnvelope {
  key: string;
  instanceId: InstanceId;
  ttlSeconds: number;
  value: unknown;
}

/** One record file as a scan saw it. */
export interface FileEntry {
  key: string;
  path: string;
  envelope: FileEnvelope;
  /** Raw file text; a changed text means a changed value. */
  text: string;
  mtimeMs: number;
  ino: number;
  size: number;
}

const SUFFIX = '.json';
const MAX_NAME_BYTES = 255;
const SCAN_PARALLELISM = 16;

export function fileNameForKey(key: string): string {
  // A leading dot would hide the record among temp files; '.' and '..' are not file names.
  const name = encodeURIComponent(key).replace(/^\./, '%2E') + SUFFIX;
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new TandemError('invalid_argument', `discovery key too long for the file backend (${key.length} chars): ${key.slice(0, 80)}...`);
  }
  return name;
}

export function keyForFileName(name: string): string | undefined {
  if (!name.endsWith(SUFFIX) || name.startsWith('.')) return undefined;
  try {
    return decodeURIComponent(name.slice(0, -SUFFIX.length));
  } catch {
    return undefined;
  }
}

export function isExpired(entry: Pick<FileEntry, 'mtimeMs' | 'envelope'>, nowMs: number): boolean {
  return nowMs - entry.mtimeMs > entry.envelope.ttlSeconds * 1000;
}

/** Write atomically: temp file in the same directory, then rename over the target. */
export async function writeRecord(dir: string, envelope: FileEnvelope): Promise<void> {
  const target = join(dir, fileNameForKey(envelope.key));
  const temp = join(dir, `.tmp-${randomBytes(6).toString('hex')}`);
  await writeFile(temp, JSON.stringify(envelope));
  try {
    await rename(temp, target);
  } catch (err) {
    await unlink(temp).catch(() => undefined);
    throw err;
  }
}

/** Bump the heartbeat. Throws ENOENT when the file is gone (the caller rewrites it). */
export async function touchRecord(dir: string, key: string, at: Date): Promise<void> {
  await utimes(join(dir, fileNameForKey(key)), at, at);
}

export async function removeRecord(dir: string, key: string): Promise<void> {
  await unlinkQuiet(join(dir, fileNameForKey(key)));
}

export async function unlinkQuiet(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/**
 * Read every record file whose key starts with `prefix`. `previous` lets a poll loop skip
 * re-reading files whose (ino, size, mtime) did not change. Expired files are included; the
 * caller decides. Files that vanish or do not parse mid-scan are skipped.
 */
export async function scanRecords(dir: string, prefix: string, previous?: Map<string, FileEntry>): Promise<FileEntry[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
  const wanted: Array<[string, string]> = [];
  for (const name of names) {
    const key = keyForFileName(name);
    if (key !== undefined && key.startsWith(prefix)) wanted.push([key, join(dir, name)]);
  }
  // fs calls go through libuv's thread pool: keep several in flight, but bounded.
  const out: FileEntry[] = [];
  for (let i = 0; i < wanted.length; i += SCAN_PARALLELISM) {
    const batch = wanted.slice(i, i + SCAN_PARALLELISM);
    const entries = await Promise.all(batch.map(([key, path]) => readEntry(path, key, previous?.get(key))));
    for (const entry of entries) if (entry !== undefined) out.push(entry);
  }
  return out;
}

async function readEntry(path: string, key: string, cached: FileEntry | undefined): Promise<FileEntry | undefined> {
  try {
    const st = await stat(path);
    if (cached !== undefined && cached.ino === st.ino && cached.size === st.size && cached.mtimeMs === st.mtimeMs) {
      return cached;
    }
    const text = await readFile(path, 'utf8');
    const envelope = parseEnvelope(text, key);
    if (envelope === undefined) return undefined;
    return { key, path, envelope, text, mtimeMs: st.mtimeMs, ino: st.ino, size: st.size };
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

function parseEnvelope(text: string, key: string): FileEnvelope | undefined {
  try {
    const raw = JSON.parse(text) as Partial<FileEnvelope>;
    if (raw.key !== key || typeof raw.instanceId !== 'string' || typeof raw.ttlSeconds !== 'number' || !('value' in raw)) {
      return undefined;
    }
    return raw as FileEnvelope;
  } catch {
    return undefined;
  }
}

export function isNotFound(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}
