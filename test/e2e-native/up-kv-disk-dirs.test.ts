/**
 * `runtime up --kv-disk-cache-dir DIR` with two workers: each worker's disk tier (G3) lives in
 * its own DIR/<worker name>, so they never adopt or evict each other's blocks, and a restarted
 * worker (same name) finds its own blocks again.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/ports.js';
import { startUp, stopAll, type Up } from '../e2e/up.js';

describe('runtime up: one disk tier directory per worker', () => {
  let cacheDir: string;
  let up: Up | undefined;

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-g3-'));
  });
  afterAll(async () => {
    if (up !== undefined) await stopAll([up]);
    await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);

  it('gives agg-0 and agg-1 their own directories under --kv-disk-cache-dir', async () => {
    const disk = join(cacheDir, 'g3');
    // The native CPU engine: the mocker's disk tier is simulated and writes no files.
    up = await startUp(cacheDir, ['--engine', 'native', '--model', 'tiny', '--workers', '2', '--threads', '1', '--num-gpu-blocks', '64', '--kv-host-cache-gb', '0.001', '--kv-disk-cache-dir', disk, '--kv-disk-cache-gb', '0.01', '--http-port', String(await freePort())]);
    expect((await readdir(disk)).sort()).toEqual(['agg-0', 'agg-1']);
  }, 120_000);
});
