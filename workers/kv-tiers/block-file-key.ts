/**
 * The disk tier's per-directory secret: the key of the HMAC-SHA256 that tags every block file
 * (disk-block-store.ts). A CRC only catches accidents; whoever can write the cache directory
 * can also write a block with a valid CRC, and the worker would serve it as real KV. With the
 * tag, a block file is only loaded when it was written by a process that can read this key.
 *
 *   <dir>/.tandem-kv-key   32 random bytes, mode 0600, owned by the worker's user
 *
 * A key file that is not a regular file, is readable by others, or is owned by another user
 * was not written by us (or was exposed): it is replaced by a fresh key, so every block tagged
 * under the old one fails its check and is recomputed, never served. Tags are computed with
 * WebCrypto, whose work runs on libuv's thread pool, never on the event loop.
 */
import { randomBytes, webcrypto } from 'node:crypto';
import { constants } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';

export const KEY_FILE = '.tandem-kv-key';
export type BlockFileKey = webcrypto.CryptoKey;
const KEY_BYTES = 32;
export const TAG_BYTES = 32;

/** Loads the directory's key, or makes one; resolves to a WebCrypto HMAC key. */
export async function loadBlockFileKey(dir: string): Promise<BlockFileKey> {
  const path = join(dir, KEY_FILE);
  let raw = await readOwnKey(path);
  if (raw === undefined) {
    // Whatever is there (an exposed file, a symlink, even a directory) is not ours to trust.
    await rm(path, { force: true, recursive: true });
    raw = randomBytes(KEY_BYTES);
    try {
      const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
      try {
        await fh.writeFile(raw);
      } finally {
        await fh.close();
      }
    } catch (err) {
      // Another process of ours (sharing the directory) made it first: use theirs.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      raw = await readOwnKey(path);
      if (raw === undefined) throw new Error(`${path}: the disk tier's key file is not one this process may trust`);
    }
  }
  return webcrypto.subtle.importKey('raw', raw, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
}

/** The key's bytes when the file is ours (regular, 0600 or stricter, our uid, the right size); else undefined. */
async function readOwnKey(path: string): Promise<Buffer | undefined> {
  let fh;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return undefined;
  }
  try {
    const st = await fh.stat();
    const uid = process.getuid?.();
    if (!st.isFile() || (st.mode & 0o077) !== 0 || (uid !== undefined && st.uid !== uid) || st.size !== KEY_BYTES) return undefined;
    const raw = await fh.readFile();
    return raw.length === KEY_BYTES ? raw : undefined;
  } finally {
    await fh.close();
  }
}

/** HMAC-SHA256 of `data`, off the event loop. */
export async function blockTag(key: BlockFileKey, data: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await webcrypto.subtle.sign('HMAC', key, data));
}

/** True when `tag` is the HMAC of `data` (a constant-time check, off the event loop). */
export function verifyBlockTag(key: BlockFileKey, tag: Uint8Array, data: Uint8Array): Promise<boolean> {
  return webcrypto.subtle.verify('HMAC', key, tag, data);
}
