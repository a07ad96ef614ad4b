/**
 * A real serving process (the mocker worker) whose etcd lease is lost for longer than the TTL
 * stops taking work, drains and exits non-zero, instead of living on as a zombie; an outage
 * shorter than the TTL leaves it serving.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { spawnCli } from '../harness/processes.js';

const TTL = 3;

describe('runtime worker under etcd outages', () => {
  let etcd: EtcdServer;
  const dir = mkdtempSync(join(tmpdir(), 'tandem-lease-'));
  const modelDir = join(dir, 'tiny');

  beforeAll(async () => {
    [etcd] = await Promise.all([startEtcd(), makeTinyModel({ arch: 'llama', outDir: modelDir, dtype: 'f32', seed: 1 })]);
  });
  afterAll(async () => {
    await etcd?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const startWorker = async () => {
    const worker = spawnCli(['worker', '--engine', 'mocker', '--model', modelDir, '--discovery', 'etcd', '--event-plane', 'direct', '--lease-ttl', String(TTL)], {
      ETCD_ENDPOINTS: etcd.endpoint,
    });
    await worker.waitForLine(/worker ready/, 30_000);
    return worker;
  };

  it('an outage shorter than the TTL leaves the worker serving', async () => {
    const worker = await startWorker();
    try {
      await etcd.kill();
      await new Promise((r) => setTimeout(r, 800));
      await etcd.restart();
      await new Promise((r) => setTimeout(r, (TTL + 1) * 1000));
      expect(worker.running).toBe(true);
      expect(worker.output()).not.toContain('lease lost');
    } finally {
      worker.kill('SIGTERM');
      expect((await worker.exited()).code).toBe(0);
    }
  }, 30_000);

  it('an outage longer than the TTL makes the worker drain and exit with code 3', async () => {
    const worker = await startWorker();
    await etcd.kill();
    const started = Date.now();
    const { code } = await worker.exited();
    const elapsed = Date.now() - started;
    expect(code).toBe(3);
    expect(worker.output()).toContain('lease lost');
    expect(worker.output()).toContain('shutdown complete');
    // it waited out the TTL (no early exit on the first failed keep-alive) and did not hang
    expect(elapsed).toBeGreaterThanOrEqual(TTL * 1000 - 500);
    expect(elapsed).toBeLessThan((TTL + 10) * 1000);
    await etcd.restart();
  }, 40_000);
});
