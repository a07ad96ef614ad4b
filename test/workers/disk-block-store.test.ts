/**
 * G3's files under real faults: a truncated file, a checksum mismatch, a header for another
 * model, a deleted directory, a full disk (a 1 MiB tmpfs), and kill -9 in the middle of writes.
 * Bad files are dropped, never loaded; the store keeps working after each.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, truncate, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiskBlockStore } from '../../workers/kv-tiers/disk-block-store.js';
import { spawnTs } from '../harness/processes.js';
import { blockBytesFor, WRITER_STORE } from '../fixtures/kv-disk-writer.js';

const BB = 4096;
const tok = (n: number): Int32Array => Int32Array.from([n, n, n, n]);

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
    expect((await readdir(dir)).sort()).toEqual([s.fileOf(3n).split('/').pop()]);
    expect(s.numErrors).toBe(2);
    // Another model's store sees nothing it may load, and removes the file.
    const other = store(dir, 'another-model');
    expect(await other.open()).toEqual([]);
    expect(await readdir(dir)).toEqual([]);
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
      expect(names).toHaveLength(3);
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
