/**
 * `logit_bias` end to end: the frontend validates it, the request plane carries it, and both
 * engines apply it. One frontend, a mocker worker and a native worker (real engines, real
 * gRPC, one process), the same tiny model served under two names. Output token ids are read
 * back through `logprobs` with `return_tokens_as_token_ids`.
 * The mocker's semantics are the pure `applyMockLogitBias` (worked cases below).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { applyMockLogitBias } from '../../workers/engines/mocker/tokens.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { startWorker, type RunningWorker, type WorkerOptions } from '../../workers/process/worker-process.js';
import { waitFor } from './harness.js';

describe('mocker logit bias (pure): its token leads by 1 logit, biases add, greedy argmax', () => {
  const fallback = (avoid: number[]) => (avoid.includes(11) ? 12 : 11);
  it('no bias or a small one keeps the mock token', () => {
    expect(applyMockLogitBias(5, [], 100, fallback)).toBe(5);
    expect(applyMockLogitBias(5, [[9, 0.9]], 100, fallback)).toBe(5); // 0.9 < 1
  });
  it('+100 forces a token; the larger of two forced biases wins', () => {
    expect(applyMockLogitBias(5, [[9, 100]], 100, fallback)).toBe(9);
    expect(applyMockLogitBias(5, [[9, 50], [20, 80]], 100, fallback)).toBe(20);
  });
  it('-100 on the mock token bans it: the next deterministic token not banned', () => {
    expect(applyMockLogitBias(11, [[11, -100]], 100, fallback)).toBe(12);
    // A mildly positive token beats the unbiased rest once the mock token is banned.
    expect(applyMockLogitBias(11, [[11, -100], [40, 0.5]], 100, fallback)).toBe(40);
  });
  it('ids outside the vocabulary are ignored', () => {
    expect(applyMockLogitBias(5, [[100, 100], [-1, 100]], 100, fallback)).toBe(5);
  });
});

describe('logit_bias through the frontend to the mocker and native engines', () => {
  const store = new MemoryDiscoveryStore();
  const runtimes: DistributedRuntime[] = [];
  const workers: RunningWorker[] = [];
  let dir: string;
  let frontend: FrontendHandle;

  const runtime = async (name: string) => {
    const rt = await DistributedRuntime.create({ name, discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
    runtimes.push(rt);
    return rt;
  };
  const base = (modelDir: string): Omit<WorkerOptions, 'engine' | 'modelName'> => ({
    modelDir, mode: 'agg', namespace: 'tandem', blockSize: 16, numGpuBlocks: 256, maxNumBatchedTokens: 2048, maxNumSeqs: 16,
    speedupRatio: 1000, device: 'cpu', threads: 1, loadMetricsIntervalMs: 1000,
  });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-logit-bias-'));
    const modelDir = join(dir, 'tiny');
    await makeTinyModel({ arch: 'llama', outDir: modelDir });
    workers.push(await startWorker(await runtime('mocker'), { ...base(modelDir), engine: 'mocker', modelName: 'tiny-mocker' }));
    workers.push(await startWorker(await runtime('native'), { ...base(modelDir), engine: 'native', modelName: 'tiny-native' }));
    frontend = await startFrontend({ runtime: await runtime('frontend'), host: '127.0.0.1', httpPort: 0 });
    await waitFor(() => frontend.models.model('tiny-mocker')?.candidates().length === 1 && frontend.models.model('tiny-native')?.candidates().length === 1, 20_000);
  }, 120_000);
  afterAll(async () => {
    await frontend?.close();
    for (const w of workers) await w.close();
    for (const rt of runtimes) await rt.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Greedy completion of a fixed token prompt; returns the generated token ids. */
  async function generate(model: string, logitBias?: Record<string, number>): Promise<number[]> {
    const res = await fetch(`${frontend.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model, prompt: [10, 20, 30, 40, 50], max_tokens: 4, temperature: 0, seed: 3, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
        ...(logitBias ? { logit_bias: logitBias } : {}),
      }),
    });
    const body = (await res.json()) as { choices: Array<{ logprobs: { tokens: string[] } }> };
    expect(res.status, JSON.stringify(body)).toBe(200);
    return body.choices[0]!.logprobs.tokens.map((t) => Number(t.slice('token_id:'.length)));
  }

  for (const model of ['tiny-mocker', 'tiny-native']) {
    it(`${model}: +100 on a token forces it at every step under greedy; -100 bans the first greedy token`, async () => {
      const plain = await generate(model);
      expect(plain).toHaveLength(4);
      const forced = plain[0] === 77 ? 78 : 77;
      expect(await generate(model, { [String(forced)]: 100 })).toEqual([forced, forced, forced, forced]);
      const banned = await generate(model, { [String(plain[0])]: -100 });
      expect(banned[0]).not.toBe(plain[0]);
      // Deterministic: the same request gives the same tokens again.
      expect(await generate(model)).toEqual(plain);
    });
  }
});
