/**
 * `runtime bench` against the real stack (frontend + two mocker workers as processes): the
 * requests it sends and the token lengths the server reports match the workload it was asked for.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBench } from '../../bench/loadgen/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { freePort } from '../harness/ports.js';
import { spawnCli, type Spawned } from '../harness/processes.js';

describe('runtime bench against the frontend and mocker workers', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-bench-stack-'));
  const modelDir = join(dir, 'tiny-llama');
  const procs: Spawned[] = [];
  let url = '';

  beforeAll(async () => {
    await makeTinyModel({ arch: 'llama', outDir: modelDir, dtype: 'f32', seed: 0 });
    const port = await freePort();
    const common = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '3'];
    for (let i = 0; i < 2; i++) {
      procs.push(spawnCli(['worker', '--engine', 'mocker', '--model', modelDir, '--speedup-ratio', '50', ...common]));
    }
    procs.push(spawnCli(['frontend', '--http-port', String(port), '--host', '127.0.0.1', ...common]));
    url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 45_000;
    for (;;) {
      const res = await fetch(`${url}/health`).catch(() => undefined);
      if (res?.ok) break;
      if (Date.now() > deadline) throw new Error(`stack did not come up:\n${procs.map((p) => p.output().slice(-1500)).join('\n')}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('random workload: every request completes with the requested ISL and OSL', async () => {
    const { report } = await runBench({
      url,
      model: 'tiny-llama',
      workload: 'random',
      tokenizer: modelDir,
      isl: 96,
      islStd: 24,
      osl: 24,
      oslStd: 6,
      requests: 40,
      concurrency: 8,
      seed: 7,
      progress: 'off',
    });
    expect(report.requests).toHaveLength(40);
    expect(report.requests.every((r) => r.ok)).toBe(true);
    for (const r of report.requests) {
      expect(r.isl).toBe(r.isl_requested);
      expect(r.osl).toBe(r.osl_requested);
    }
    // the lengths really vary as asked, rather than all being the mean
    expect(new Set(report.requests.map((r) => r.isl)).size).toBeGreaterThan(5);
  }, 60_000);

  it('shared-prefix workload: groups × prompts, and the shared system prompt is served from cache', async () => {
    const { report } = await runBench({
      url,
      model: 'tiny-llama',
      workload: 'shared-prefix',
      tokenizer: modelDir,
      groups: 3,
      promptsPerGroup: 4,
      systemTokens: 128,
      questionTokens: 16,
      osl: 8,
      concurrency: 1,
      seed: 3,
      progress: 'off',
    });
    expect(report.requests).toHaveLength(12);
    expect(report.requests.every((r) => r.ok && r.osl === 8)).toBe(true);
    for (const r of report.requests) expect(r.isl).toBe(r.isl_requested);
    // with round-robin over 2 workers, later prompts of a group find the system prompt cached
    const cached = report.requests.reduce((sum, r) => sum + (r.cached_tokens ?? 0), 0);
    expect(cached).toBeGreaterThanOrEqual(128);
  }, 60_000);
});
