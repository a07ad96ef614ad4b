/**
 * Reading an adapter's files without trusting them. A load names a directory on the worker's
 * host, so what lies there may be anything: a symlink to /dev/zero, a FIFO, a sparse file of
 * a terabyte, a directory of a million entries. Every read here is bounded before it starts:
 *
 * - a file is opened with O_NONBLOCK (opening a FIFO with no writer returns at once instead of
 *   hanging) and refused unless fstat says it is a regular file (symlinks are followed, as in a
 *   Hugging Face cache, but must end at a regular file);
 * - its size is checked against the caller's bound before a byte is read, and no more than
 *   that size is ever read (a file that grows meanwhile is not followed);
 * - weight bytes are streamed through the hash in fixed chunks, never held whole.
 *
 * Refusals are LoraAdapterErrors: `message` is what a client may read (no path, no errno, no
 * file content beyond names the format defines), `detail` what the worker logs.
 */
import { constants, type Stats } from 'node:fs';
import { open, opendir, realpath, type FileHandle } from 'node:fs/promises';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { ModelFormatError } from '../models/errors.js';

/** Why an adapter was refused; stable, for logs and tests. */
export type LoraRefusal =
  | 'unreadable'        // missing, not a directory, no permission, not a regular file (all one answer)
  | 'outside_root'      // the path is not under an allowed adapter directory (--lora-root)
  | 'too_large'         // weight files over --max-lora-bytes, or a config/header over its bound
  | 'invalid_config'    // adapter_config.json content
  | 'invalid_weights'   // safetensors content: header, names, shapes
  | 'unsupported';      // a valid adapter the engines cannot apply (DoRA, lm_head, rank...)

/**
 * One sentence for every way a path can fail to hold an adapter: a client that names paths
 * learns nothing about the worker's filesystem (ENOENT vs ENOTDIR vs EACCES, FIFOs, devices).
 */
export const UNREADABLE_ADAPTER = 'the adapter cannot be read: lora_path must name a directory that holds adapter_config.json and *.safetensors regular files the worker may read';
export const OUTSIDE_ROOT = 'lora_path is not under a directory this worker loads adapters from (--lora-root)';

export class LoraAdapterError extends ModelFormatError {
  constructor(
    readonly reason: LoraRefusal,
    /** Safe to show a client. */
    message: string,
    /** For the worker's log: paths, errno, parser messages. */
    readonly detail: string = message,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** adapter_config.json is a few hundred bytes; anything past this is not one. */
export const MAX_ADAPTER_CONFIG_BYTES = 1 << 20;
/** A LoRA header lists ~150 bytes per tensor: 16 MiB is over 100k tensors. */
export const MAX_ADAPTER_HEADER_BYTES = 16 << 20;
/** Entries of an adapter directory looked at; a directory with more is refused. */
export const MAX_ADAPTER_DIR_ENTRIES = 4096;
/** Weight files one adapter may have. */
export const MAX_ADAPTER_WEIGHT_FILES = 64;
const READ_CHUNK_BYTES = 1 << 20;

// libuv adds O_CLOEXEC itself.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

export function unreadable(detail: string, cause?: unknown): LoraAdapterError {
  return new LoraAdapterError('unreadable', UNREADABLE_ADAPTER, detail, cause === undefined ? undefined : { cause });
}

function describe(err: unknown): string {
  return (err as NodeJS.ErrnoException)?.code ?? (err as Error)?.message ?? String(err);
}

/** A regular file opened for reading, with its size at open time. */
export interface OpenedFile {
  handle: FileHandle;
  size: number;
  path: string;
}

/**
 * Opens `path` without blocking and refuses anything but a regular file of at most `maxBytes`
 * (else `tooLarge` is the client's answer) whose real path lies under `roots` (none =
 * anywhere). The caller closes the handle.
 */
export async function openRegularFile(path: string, maxBytes: number, tooLarge: string, roots: readonly string[] = []): Promise<OpenedFile> {
  let handle: FileHandle;
  try {
    handle = await open(path, OPEN_FLAGS);
  } catch (err) {
    throw unreadable(`${path}: open failed: ${describe(err)}`, err);
  }
  let st: Stats;
  try {
    st = await handle.stat();
  } catch (err) {
    await handle.close();
    throw unreadable(`${path}: fstat failed: ${describe(err)}`, err);
  }
  if (!st.isFile()) {
    await handle.close();
    throw unreadable(`${path}: not a regular file (mode ${(st.mode & constants.S_IFMT).toString(8)})`);
  }
  if (st.size > maxBytes) {
    await handle.close();
    throw new LoraAdapterError('too_large', tooLarge, `${path}: ${st.size} bytes, ${maxBytes} allowed`);
  }
  const f = { handle, size: st.size, path };
  try {
    await openedUnder(f, roots);
  } catch (err) {
    await handle.close();
    throw err;
  }
  return f;
}

/** Exactly `length` bytes at `position`; a file that shrank meanwhile is unreadable. */
export async function readExactly(f: OpenedFile, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await f.handle.read(buf, done, length - done, position + done);
    if (bytesRead === 0) throw unreadable(`${f.path}: shorter than its size at open (${f.size} bytes)`);
    done += bytesRead;
  }
  return buf;
}

/** A whole small file (bounded by `maxBytes`) as UTF-8. */
export async function readSmallFile(path: string, maxBytes: number, tooLarge: string, roots: readonly string[] = []): Promise<string> {
  const f = await openRegularFile(path, maxBytes, tooLarge, roots);
  try {
    return (await readExactly(f, 0, f.size)).toString('utf8');
  } finally {
    await f.handle.close();
  }
}

/** Feeds `length` bytes from `position` to `sink` in fixed chunks: the file is never held whole. */
export async function streamBytes(f: OpenedFile, position: number, length: number, sink: (chunk: Uint8Array) => void): Promise<void> {
  const buf = Buffer.allocUnsafe(Math.min(READ_CHUNK_BYTES, Math.max(1, length)));
  let done = 0;
  while (done < length) {
    const want = Math.min(buf.length, length - done);
    const { bytesRead } = await f.handle.read(buf, 0, want, position + done);
    if (bytesRead === 0) throw unreadable(`${f.path}: shorter than its size at open (${f.size} bytes)`);
    sink(buf.subarray(0, bytesRead));
    done += bytesRead;
  }
}

/** Names in `dir` ending in `suffix`, sorted; the directory is read as a stream and bounded. */
export async function listFiles(dir: string, suffix: string): Promise<string[]> {
  const out: string[] = [];
  let seen = 0;
  try {
    const d = await opendir(dir);
    for await (const entry of d) {
      if (++seen > MAX_ADAPTER_DIR_ENTRIES) {
        // for-await closes the directory on break.
        throw new LoraAdapterError('too_large', `the adapter directory has more than ${MAX_ADAPTER_DIR_ENTRIES} entries`, `${dir}: over ${MAX_ADAPTER_DIR_ENTRIES} entries`);
      }
      if (entry.name.endsWith(suffix)) out.push(entry.name);
    }
  } catch (err) {
    if (err instanceof LoraAdapterError) throw err;
    throw unreadable(`${dir}: cannot list: ${describe(err)}`, err);
  }
  return out.sort();
}

/**
 * The adapter directory a load may read, under the allowed roots (`--lora-root`; empty = any).
 * The lexical check answers OUTSIDE_ROOT (it tells the client only about the string it sent);
 * a path inside a root whose real path leaves every root (a symlink out) is answered as
 * unreadable, so the check does not map the filesystem either.
 */
export async function adapterDirUnder(dirIn: string, roots: readonly string[]): Promise<string> {
  const dir = resolve(dirIn);
  if (roots.length === 0) return dir;
  const lexicalRoots = roots.map((r) => resolve(r));
  if (!lexicalRoots.some((r) => isUnder(dir, r))) throw new LoraAdapterError('outside_root', OUTSIDE_ROOT, `${dir} is under none of ${lexicalRoots.join(', ')}`);
  let real: string;
  try {
    real = await realpath(dir);
  } catch (err) {
    throw unreadable(`${dir}: realpath failed: ${describe(err)}`, err);
  }
  const realRoots = await Promise.all(lexicalRoots.map((r) => realpath(r).catch(() => r)));
  if (!realRoots.some((r) => isUnder(real, r))) throw unreadable(`${dir} resolves to ${real}, under none of ${realRoots.join(', ')}`);
  return real;
}

/**
 * The file an open handle refers to must lie under the roots: read through /proc/self/fd, so a
 * symlink swapped after the check cannot redirect the read (realpath of the name elsewhere).
 */
async function openedUnder(f: OpenedFile, roots: readonly string[]): Promise<void> {
  if (roots.length === 0) return;
  let real: string;
  try {
    real = await realpath(`/proc/self/fd/${f.handle.fd}`).catch(() => realpath(f.path));
  } catch (err) {
    throw unreadable(`${f.path}: realpath failed: ${describe(err)}`, err);
  }
  const realRoots = await Promise.all(roots.map((r) => realpath(resolve(r)).catch(() => resolve(r))));
  if (!realRoots.some((r) => isUnder(real, r))) throw unreadable(`${f.path} resolves to ${real}, under none of ${realRoots.join(', ')}`);
}

function isUnder(path: string, root: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}
