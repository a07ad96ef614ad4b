/**
 * G3's files under real faults: a truncated file, a checksum mismatch, a header for another
 * model, blocks forged by someone who can write the directory but lacks its key (a valid CRC,
 * another directory's tag), an exposed or planted key file, a deleted directory, a full disk (a
 * 1 MiB tmpfs), and kill -9 in the middle of writes. Bad files are dropped, never loaded; the
 * store keeps working after each.
 */
import { execFileSync } from 'node:child_process';
import { chmod, lstat, mkdtemp, readdir, readFile, rm, stat, symlink, truncate, writeFile, mkdir } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiskBlockStore } from '../../workers/kv-tiers/disk-block-store.js';
import { KEY_FILE } from '../../workers/kv-tiers/block-file-key.js';
import { spawnTs } from '../harness/processes.js';
import { blockBytesFor, WRITER_STORE } from '../fixtures/kv-disk-writer.js';

const BB = 4096;
const tok = (n: number): Int32Array => Int32Array.from([n, n, n, n]);
/** The block files of a directory (its key file aside), sorted. */
const blockFiles = async (dir: string): Promise<string[]> => (await readdir(dir)).filter((n) => n.endsWith('.kvb')).sort();

describe('DiskBlockStore', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-kv-disk-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  const store = (dir: string, model = 'm'): DiskBlockStore => new DiskBlockStore({ dir, blockBytes: BB, ...WRITER_STORE, model });

  it('round-trips a block and rebuilds its index from the directory at start', async () => {
    const dir = join(root, 'roundtrip');
    const a = store(dir);
    expect(await a.open()).toEqual([]);
    expect(await a.write(7n, tok(7), 3, blockBytesFor(7n, BB))).toBe(true);
    expect(await a.write(9n, tok(9), 2, blockBytesFor(9n, BB))).toBe(true);
    expect(await a.read(7n, tok(7))).toEqual(blockBytesFor(7n, BB));
    // Another block under the same hash (a collision) is not served, and the file that is not
    // what the index expected is dropped.
    expect(await a.read(9n, tok(8))).toBeUndefined();
    await a.flush();
    const found = await store(dir).open();
    expect(found.map((f) => [f.hash, Array.from(f.tokens), f.reuse])).toEqual([[7n, [7, 7, 7, 7], 3]]);
  });

  it('drops a truncated file and a checksum mismatch on read, and a file of another model at open', async () => {
    const dir = join(root, 'corrupt');
    const s = store(dir);
    await s.open();
    for (const h of [1n, 2n, 3n]) expect(await s.write(h, tok(Number(h)), 2, blockBytesFor(h, BB))).toBe(true);
    await truncate(s.fileOf(1n), 100);
    const bytes = await readFile(s.fileOf(2n));
    bytes[bytes.length - 10]! ^= 0xff; // one flipped payload byte
    await writeFile(s.fileOf(2n), bytes);
    expect(await s.read(1n, tok(1))).toBeUndefined();
    expect(await s.read(2n, tok(2))).toBeUndefined();
    expect(await s.read(3n, tok(3))).toEqual(blockBytesFor(3n, BB));
    await s.flush();
    expect(await blockFiles(dir)).toEqual([s.fileOf(3n).split('/').pop()]);
    expect(s.numErrors).toBe(2);
    // Another model's store sees nothing it may load, and removes the file.
    const other = store(dir, 'another-model');
    expect(await other.open()).toEqual([]);
    expect(await blockFiles(dir)).toEqual([]);
  });

  it('the directory is a trust boundary: a block rewritten with a valid CRC (the old format) or tagged under another key is refused and dropped', async () => {
    const dir = join(root, 'forged');
    const s = store(dir);
    await s.open();
    expect(await s.write(5n, tok(5), 2, blockBytesFor(5n, BB))).toBe(true);
    const forged = new Uint8Array(BB).fill(0x42);
    // Someone who can write the directory, and knows the format, but not the key.
    const header = Buffer.from(JSON.stringify({ model: 'm', layout: WRITER_STORE.layout, dtype: WRITER_STORE.dtype, blockBytes: BB, hash: '5', tokens: [5, 5, 5, 5], reuse: 2 }));
    for (const version of [1, 2]) {
      const prefix = Buffer.alloc(12);
      prefix.writeUInt32LE(0x424b5654, 0);
      prefix.writeUInt32LE(version, 4);
      prefix.writeUInt32LE(header.length, 8);
      const crc = Buffer.alloc(4);
      crc.writeUInt32LE(crc32(forged, crc32(header)) >>> 0, 0);
      await writeFile(s.fileOf(5n), Buffer.concat([prefix, header, forged, crc]));
      expect(await s.read(5n, tok(5)), `version ${version} with a CRC`).toBeUndefined();
      await s.flush();
      expect(await blockFiles(dir)).toEqual([]);
    }
    // A well-formed file from another directory: tagged, but under that directory's key.
    const other = store(join(root, 'forged-elsewhere'));
    await other.open();
    expect(await other.write(5n, tok(5), 2, forged)).toBe(true);
    await writeFile(s.fileOf(5n), await readFile(other.fileOf(5n)));
    expect(await other.read(5n, tok(5))).toEqual(forged);
    expect(await s.read(5n, tok(5))).toBeUndefined();
    // Its own blocks still read back, across a restart (the key stays).
    expect(await s.write(6n, tok(6), 2, blockBytesFor(6n, BB))).toBe(true);
    expect(await store(dir).read(6n, tok(6))).toEqual(blockBytesFor(6n, BB));
  });

  it('keeps its key in a 0600 file; a key file others can read, or a symlink, is replaced, and what it tagged is refused', async () => {
    const dir = join(root, 'key-file');
    const s = store(dir);
    await s.open();
    const keyPath = join(dir, KEY_FILE);
    expect((await stat(keyPath)).mode & 0o777).toBe(0o600);
    expect(await s.write(1n, tok(1), 2, blockBytesFor(1n, BB))).toBe(true);
    // Exposed: readable by others. A new store does not trust it.
    await chmod(keyPath, 0o644);
    const exposed = store(dir);
    await exposed.open();
    expect((await stat(keyPath)).mode & 0o777).toBe(0o600);
    expect(await exposed.read(1n, tok(1))).toBeUndefined();
    // A symlink in its place (to a key someone else controls) is not followed.
    expect(await exposed.write(2n, tok(2), 2, blockBytesFor(2n, BB))).toBe(true);
    const planted = join(root, 'planted-key');
    await writeFile(planted, Buffer.alloc(32, 7), { mode: 0o600 });
    await rm(keyPath);
    await symlink(planted, keyPath);
    const next = store(dir);
    await next.open();
    expect((await lstat(keyPath)).isSymbolicLink()).toBe(false);
    expect(await next.read(2n, tok(2))).toBeUndefined();
  });

  it('recreates a deleted directory on the next write', async () => {
    const dir = join(root, 'deleted');
    const s = store(dir);
    await s.open();
    expect(await s.write(1n, tok(1), 2, blockBytesFor(1n, BB))).toBe(true);
    await rm(dir, { recursive: true, force: true });
    expect(await s.read(1n, tok(1))).toBeUndefined();
    expect(await s.write(2n, tok(2), 2, blockBytesFor(2n, BB))).toBe(true);
    expect(await s.read(2n, tok(2))).toEqual(blockBytesFor(2n, BB));
  });

  it('a full disk fails the write (no file left under its name), and the store writes again once space is freed', async () => {
    const dir = join(root, 'tmpfs');
    await mkdir(dir, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
    try {
      const big = 300 * 1024;
      const s = new DiskBlockStore({ dir, blockBytes: big, ...WRITER_STORE });
      await s.open();
      const results: boolean[] = [];
      for (let n = 1n; n <= 5n; n++) results.push(await s.write(n, tok(Number(n)), 2, blockBytesFor(n, big)));
      expect(results).toEqual([true, true, true, false, false]);
      expect(s.numErrors).toBe(2);
      const names = await readdir(dir);
      expect(names.filter((n) => n.includes('.tmp-'))).toEqual([]);
      expect(await blockFiles(dir)).toHaveLength(3);
      expect(await s.read(4n, tok(4))).toBeUndefined();
      await s.delete(1n);
      expect(await s.write(4n, tok(4), 2, blockBytesFor(4n, big))).toBe(true);
      expect(await s.read(4n, tok(4))).toEqual(blockBytesFor(4n, big));
    } finally {
      execFileSync('umount', [dir]);
    }
  });

  it('kill -9 during writes: at start every listed block reads back intact, temp files are swept', { timeout: 120_000 }, async () => {
    const dir = join(root, 'killed');
    const big = 256 * 1024;
    const child = spawnTs('test/fixtures/kv-disk-writer.ts', [dir, String(big)]);
    await child.waitForLine(/wrote 6/, 60_000);
    child.kill('SIGKILL');
    await child.exited();
    const s = new DiskBlockStore({ dir, blockBytes: big, ...WRITER_STORE });
    const found = await s.open();
    expect(found.length).toBeGreaterThanOrEqual(6);
    expect(found.length).toBeLessThanOrEqual(200);
    for (const f of found) expect(await s.read(f.hash, f.tokens)).toEqual(blockBytesFor(f.hash, big));
    expect((await readdir(dir)).filter((n) => n.includes('.tmp-'))).toEqual([]);
  });
});
