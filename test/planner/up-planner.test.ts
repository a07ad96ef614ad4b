/**
 * `runtime up --planner load` with mocker workers, as processes. Aggregated: a burst of concurrent streams
 * makes the aggregated pool grow (KV usage above 0.9), and once the burst is over it shrinks back
 * to --min-workers (1) by SIGTERM-with-drain. Every request completes with its full length and
 * [DONE], including long streams still running while workers are being stopped.
 * Disaggregated (`--prefill 1 --decode 1`): a burst of long prompts grows the prefill pool on its
 * queue signal while the decode pool stays at 1, and prefill shrinks back afterwards.
 *
 * Needs `npm run build` (spawns bin/runtime.js). KV is kept small (64 blocks × 16 tokens) so a
 * dozen streams fill a worker.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil, readSse } from '../harness/http.js';
import { startUp, stopAll, type Up } from '../e2e/up.js';
import { activeShare } from '../../perf-model/index.js';
import { makeTinyModel, parameterCounts, readModelConfig } from '../../workers/models/index.js';

const MODEL = 'tiny-llama';
const ARGS = ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--planner', 'load', '--planner-interval', '1', '--max-workers', '3', '--http-port', '0', '--num-gpu-blocks', '64', '--block-size', '16', '--speedup-ratio', '0.5'];

async function instances(url: string): Promise<number> {
  const body = (await (await fetch(`${url}/health`)).json()) as { models?: Array<{ name: string; instances: number }> };
  return body.models?.find((m) => m.name === MODEL)?.instances ?? 0;
}

/** One stream; resolves with its completion tokens (from the usage chunk) and whether it ended with [DONE]. */
async function stream(url: string, i: number, maxTokens: number): Promise<{ tokens: number; done: boolean }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: `request ${i}: once upon a time there was a planner`, max_tokens: maxTokens, ignore_eos: true, seed: i, stream: true, stream_options: { include_usage: true } }),
  });
  expect(res.status).toBe(200);
  const { chunks, done } = await readSse(res);
  const usage = chunks.map((c) => c.usage as { completion_tokens?: number } | undefined).find((u) => u?.completion_tokens !== undefined);
  return { tokens: usage?.completion_tokens ?? -1, done };
}

describe('runtime up --planner load (local connector)', () => {
  let cacheDir: string;
  const started: Up[] = [];
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-planner-'));
  });
  afterAll(async () => {
    await stopAll(started);
    await rm(cacheDir, { recursive: true, force: true });
  });

  it('a burst grows the pool, it shrinks back to 1 afterwards, and every stream completes in full', async () => {
    const up = await startUp(cacheDir, ARGS);
    started.push(up);
    const out = () => up.proc.output();
    await up.proc.waitForLine(/planner: load mode every 1 s, pools agg 1\.\.3, budget 3/, 30_000);
    expect(await instances(up.url)).toBe(1);

    // The burst: 12 clients in a closed loop (each sends its next request when the last ends)
    // overflow one worker's 1024-token KV (> 0.9: up). Load mode flaps on the way (a fresh idle
    // worker pulls the pool's mean KV under 0.5), so workers are also stopped while streams run
    // on them: they must drain. The burst lasts until a worker has been drained with streams on
    // it while the pool is grown (so the pool still has a worker to shed below), or the pool has
    // reached 3, or 45 s passed.
    const drainedWorkers = () => [...out().matchAll(/^\[(agg-\d+)\] .*"inflight":(\d+).*"msg":"draining in-flight streams"/gm)].map((m) => ({ worker: m[1], inflight: Number(m[2]) }));
    const drainedBusy = () => drainedWorkers().some((d) => d.inflight > 0);
    const results: Array<{ tokens: number; done: boolean }> = [];
    let peak = 1;
    let bursting = true;
    const deadline = Date.now() + 45_000;
    const watcher = (async () => {
      while (bursting) {
        const now = await instances(up.url).catch(() => 0);
        peak = Math.max(peak, now);
        if ((now >= 2 && drainedBusy()) || peak >= 3 || Date.now() > deadline) bursting = false;
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    let n = 0;
    const clients = Array.from({ length: 12 }, async () => {
      while (bursting) results.push(await stream(up.url, n++, 80));
    });
    const t0 = Date.now();
    await Promise.all([watcher, ...clients]);
    console.log(`burst: ${results.length} requests, peak ${peak} workers, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    expect(peak).toBeGreaterThanOrEqual(2);
    expect(out()).toMatch(/planner decision \{"pool":"agg","action":"up".*"rule":"load\.up"/);

    // Long streams still running while the planner shrinks the pool (round-robin puts them on
    // every worker): 3 × ~460 tokens, about 0.45 of a worker's KV, below the 0.5 threshold.
    const tail = Array.from({ length: 3 }, (_, i) => stream(up.url, 10_000 + i, 450));
    await pollUntil('pool back to 1 worker', async () => (await instances(up.url)) === 1, 120_000, 250);
    console.log(`back to 1 worker ${((Date.now() - t0) / 1000).toFixed(1)} s after the burst began`);
    const tailResults = await Promise.all(tail);
    expect(out()).toMatch(/planner: worker draining agg-\d+ \(agg, load\.down\)/);
    await pollUntil('a drained worker exits 0', () => /agg-\d+ stopped \(code 0, signal null\)/.test(out()), 60_000, 250);

    for (const r of [...results, ...tailResults]) expect(r).toEqual({ tokens: expect.any(Number), done: true });
    expect(results.every((r) => r.tokens === 80)).toBe(true);
    expect(tailResults.map((r) => r.tokens)).toEqual(Array(3).fill(450));
    // a worker the planner stopped was still streaming: it drained instead of cutting streams
    const drained = drainedWorkers();
    console.log('drained workers', JSON.stringify(drained));
    expect(drained.some((d) => d.inflight > 0)).toBe(true);
    expect(results.length).toBeGreaterThanOrEqual(12);
    expect(up.proc.running).toBe(true);
  }, 300_000);

  it('--prefill 1 --decode 1: a burst of long prompts grows the prefill pool on its queue signal while decode stays, then prefill shrinks back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-up-planner-cfg-'));
    const config = join(dir, 'planner.json');
    // Context length 256 (the unit of the prefill queue signal) so that a tiny model's prompts queue up to it.
    await writeFile(config, JSON.stringify({ load: { contextLength: 256 }, cooldownDownS: 5, scaleDownIntervals: 3, pendingTimeoutS: 60 }));
    const up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--prefill', '1', '--decode', '1', '--planner', 'load', '--planner-interval', '1', '--max-workers', '4', '--planner-config', config, '--http-port', '0', '--kv-bytes-per-token', '4096', '--num-gpu-blocks', '1024', '--disagg-min-prefill-tokens', '64', '--speedup-ratio', '0.2']);
    started.push(up);
    const out = () => up.proc.output();
    await up.proc.waitForLine(/planner: load mode every 1 s, pools prefill 1\.\.4, decode 1\.\.4, budget 4/, 30_000);

    // 16 clients, 600-token prompts, 2 output tokens, until a third prefill worker starts or 90 s.
    const done: boolean[] = [];
    const deadline = Date.now() + 90_000;
    const grown = () => /prefill-2 started/.test(out()) || Date.now() > deadline;
    let n = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (!grown()) {
          const res = await fetch(`${up.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'word '.repeat(600) + n++, max_tokens: 2, ignore_eos: true }) });
          const body = (await res.json()) as { usage?: { completion_tokens?: number } };
          done.push(res.status === 200 && body.usage?.completion_tokens === 2);
        }
      }),
    );
    expect(out()).toMatch(/prefill-2 started/);
    expect(out()).toMatch(/planner decision \{"pool":"prefill","action":"up".*prefill queue/);
    expect(out()).not.toMatch(/planner decision \{"pool":"decode","action":"up"/); // decode's KV signal never crossed
    expect(out()).not.toMatch(/decode-1 started/);
    expect(done.length).toBeGreaterThan(0);
    expect(done.every(Boolean)).toBe(true);

    await pollUntil('prefill pool back to 1', () => /worker draining prefill-1 /.test(out()) && /worker draining prefill-2 /.test(out()), 120_000, 250);
    expect(up.proc.running).toBe(true);
    await rm(dir, { recursive: true, force: true });
  }, 300_000);

  it('a MoE model without a profile: the planner sizes with the default fit x the model\'s active share, as its mocker workers charge', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-up-planner-moe-'));
    const modelDir = join(dir, 'tiny-qwen3-moe');
    await makeTinyModel({ arch: 'qwen3_moe', outDir: modelDir });
    const share = activeShare(parameterCounts(await readModelConfig(modelDir)));
    expect(share).toBeLessThan(1);
    const up = await startUp(cacheDir, ['--engine', 'mocker', '--model', modelDir, '--workers', '1', '--planner', 'sla', '--planner-interval', '1', '--max-workers', '2', '--http-port', '0']);
    started.push(up);
    await up.proc.waitForLine(new RegExp(`planner: sla mode every 1 s, pools agg 1\\.\\.2, budget 2, step times from the default fit x active share ${share.toFixed(4).replace('.', '\\.')}$`), 30_000);
    await rm(dir, { recursive: true, force: true });
  }, 120_000);
});
