/**
 * Issue 34 (1.9): what the disk tier's keyed tag costs. Each G3 block file used to end in a
 * CRC-32 (zlib, computed on the event loop); it now ends in an HMAC-SHA256 under the
 * directory's key (WebCrypto, computed on libuv's thread pool). Side by side in one run, per
 * block size (64 KiB, 512 KiB, and 2 MiB: one 16-token block of a Llama-3.1-8B-shaped bf16 KV):
 *   - MB/s of the check alone: CRC-32 vs HMAC sign vs HMAC verify;
 *   - event-loop time the check holds per block (the CRC's whole time; the HMAC's dispatch,
 *     in which WebCrypto copies its input on the calling thread);
 *   - blocks/s of the shipped DiskBlockStore, write then read back (tag + file I/O), under `os.tmpdir()`.
 * Writes bench/results/kv-disk-tag.json and prints a table. `--quick` runs fewer blocks.
 */
import { randomBytes, webcrypto } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { DiskBlockStore } from '../workers/kv-tiers/disk-block-store.js';

const quick = process.argv.includes('--quick');
const SIZES = [64 * 1024, 512 * 1024, 2 * 1024 * 1024];
const ROUNDS = quick ? 8 : 32;

interface Row {
  blockBytes: number;
  crcMBps: number;
  hmacSignMBps: number;
  hmacVerifyMBps: number;
  crcLoopUsPerBlock: number;
  hmacLoopUsPerBlock: number;
  storeWriteBlocksPerS: number;
  storeReadBlocksPerS: number;
}

const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1e3);

async function measure(size: number, dir: string): Promise<Row> {
  const blocks = Array.from({ length: ROUNDS }, () => new Uint8Array(randomBytes(size)));
  const key = await webcrypto.subtle.importKey('raw', randomBytes(32), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
  const total = size * ROUNDS;

  let t = performance.now();
  let sink = 0;
  for (const b of blocks) sink ^= crc32(b);
  const crcMs = performance.now() - t;

  // The HMAC's event-loop share: the time until sign() returns its promise.
  let loopMs = 0;
  t = performance.now();
  const tags: Uint8Array[] = [];
  for (const b of blocks) {
    const s = performance.now();
    const p = webcrypto.subtle.sign('HMAC', key, b);
    loopMs += performance.now() - s;
    tags.push(new Uint8Array(await p));
  }
  const signMs = performance.now() - t;
  t = performance.now();
  for (const [i, b] of blocks.entries()) if (!(await webcrypto.subtle.verify('HMAC', key, tags[i]!, b))) throw new Error('verify failed');
  const verifyMs = performance.now() - t;

  const store = new DiskBlockStore({ dir: join(dir, String(size)), model: 'bench', layout: 'l', dtype: 'bf16', blockBytes: size });
  await store.open();
  const tokens = Int32Array.from({ length: 16 }, (_, i) => i);
  t = performance.now();
  await Promise.all(blocks.map((b, i) => store.write(BigInt(i + 1), tokens, 2, b)));
  const writeMs = performance.now() - t;
  t = performance.now();
  for (const [i, b] of blocks.entries()) {
    const got = await store.read(BigInt(i + 1), tokens);
    if (got === undefined || got.length !== b.length) throw new Error('read back failed');
  }
  const readMs = performance.now() - t;
  if (sink === -1) console.log(sink); // keeps the CRC loop from being optimized away
  return {
    blockBytes: size,
    crcMBps: mbps(total, crcMs),
    hmacSignMBps: mbps(total, signMs),
    hmacVerifyMBps: mbps(total, verifyMs),
    crcLoopUsPerBlock: (crcMs / ROUNDS) * 1000,
    hmacLoopUsPerBlock: (loopMs / ROUNDS) * 1000,
    storeWriteBlocksPerS: ROUNDS / (writeMs / 1000),
    storeReadBlocksPerS: ROUNDS / (readMs / 1000),
  };
}

const dir = await mkdtemp(join(tmpdir(), 'tandem-kv-tag-bench-'));
const rows: Row[] = [];
try {
  for (const size of SIZES) {
    await measure(size, dir); // warm-up
    rows.push(await measure(size, dir));
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
const fmt = (n: number, d = 0) => n.toFixed(d);
console.log('| block | CRC-32 MB/s | HMAC sign MB/s | HMAC verify MB/s | event loop per block: CRC / HMAC (µs) | store write / read (blocks/s) |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.blockBytes / 1024} KiB | ${fmt(r.crcMBps)} | ${fmt(r.hmacSignMBps)} | ${fmt(r.hmacVerifyMBps)} | ${fmt(r.crcLoopUsPerBlock)} / ${fmt(r.hmacLoopUsPerBlock)} | ${fmt(r.storeWriteBlocksPerS)} / ${fmt(r.storeReadBlocksPerS)} |`);
}
await writeFile('bench/results/kv-disk-tag.json', JSON.stringify({ date: new Date().toISOString(), rounds: ROUNDS, rows }, null, 2) + '\n');
console.log('wrote bench/results/kv-disk-tag.json');
