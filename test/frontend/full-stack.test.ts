/**
 * The frontend in front of real mocker workers (workers/process startWorker) serving a tiny
 * model made by makeTinyModel, all on the distributed runtime with shared memory discovery and
 * the gRPC request plane, driven by the official `openai` client. This is the serving path of
 * `runtime up`, in one process.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { startWorker, type RunningWorker } from '../../workers/process/worker-process.js';
import { waitFor } from './harness.js';

describe('frontend + mocker workers + tiny model (one process)', () => {
  const store = new MemoryDiscoveryStore();
  const runtimes: DistributedRuntime[] = [];
  const workers: RunningWorker[] = [];
  let dir: string;
  let frontend: FrontendHandle;
  let client: OpenAI;
  let slow: RunningWorker;

  const runtime = async (name: string) => {
    const rt = await DistributedRuntime.create({ name, discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
    runtimes.push(rt);
    return rt;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-frontend-stack-'));
    await makeTinyModel({ arch: 'llama', outDir: join(dir, 'tiny') });
    for (let i = 0; i < 2; i++) {
      workers.push(
        await startWorker(await runtime(`worker${i}`), {
          engine: 'mocker',
          modelDir: join(dir, 'tiny'),
          mode: 'agg',
          namespace: 'tandem',
          blockSize: 16,
          numGpuBlocks: 512,
          maxNumBatchedTokens: 8192,
          maxNumSeqs: 256,
          speedupRatio: 1000,
          device: 'cpu',
          loadMetricsIntervalMs: 1000,
        }),
      );
    }
    // Real-time mocker (speedup 1) under another name, so a stream is still running when cut.
    slow = await startWorker(await runtime('slow'), {
      engine: 'mocker', modelDir: join(dir, 'tiny'), modelName: 'tiny-slow', mode: 'agg', namespace: 'tandem', blockSize: 16, numGpuBlocks: 512,
      maxNumBatchedTokens: 8192, maxNumSeqs: 256, speedupRatio: 1, device: 'cpu', loadMetricsIntervalMs: 1000,
    });
    workers.push(slow);
    frontend = await startFrontend({ runtime: await runtime('frontend'), host: '127.0.0.1', httpPort: 0 });
    await waitFor(() => frontend.models.model('tiny')?.candidates().length === 2 && frontend.models.model('tiny-slow')?.candidates().length === 1, 10_000);
    client = new OpenAI({ baseURL: `${frontend.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await frontend?.close();
    for (const w of workers) await w.close();
    for (const rt of runtimes) await rt.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('serves chat (streaming) and completions (unary) with exact lengths and usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Tell me a story.' }],
      max_tokens: 24,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(finish).toBe('length');
    expect(usage!.completion_tokens).toBe(24);
    expect(usage!.prompt_tokens).toBeGreaterThan(5);

    const res = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 10, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage!.completion_tokens).toBe(10);
  });

  it('returns logprobs as token ids that match the worker tokens', async () => {
    const res = await client.completions.create({
      model: 'tiny',
      prompt: [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
      max_tokens: 6,
      ignore_eos: true,
      logprobs: 2,
      return_tokens_as_token_ids: true,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    const lp = res.choices[0]!.logprobs!;
    expect(lp.tokens).toHaveLength(6);
    for (const token of lp.tokens!) expect(token).toMatch(/^token_id:\d+$/);
    // A repeated prompt hits the prefix cache of the worker that served it (16-token blocks).
    const again = await client.completions.create(
      { model: 'tiny', prompt: [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], max_tokens: 1 },
      { headers: { 'x-worker-instance-id': workers[0]!.card.instanceId } },
    );
    const third = await client.completions.create(
      { model: 'tiny', prompt: [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], max_tokens: 1 },
      { headers: { 'x-worker-instance-id': workers[0]!.card.instanceId } },
    );
    expect(again.usage!.prompt_tokens).toBe(17);
    expect(third.usage!.prompt_tokens_details!.cached_tokens).toBe(16);
  });

  it('a disconnect mid-stream frees the worker sequence', async () => {
    const controller = new AbortController();
    const res = await fetch(`${frontend.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-slow', prompt: 'a long one', max_tokens: 1500, ignore_eos: true, stream: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    expect(slow.loop.stats().numRunning).toBe(1);
    controller.abort();
    await waitFor(() => slow.loop.stats().numRunning === 0 && slow.loop.stats().numWaiting === 0, 5000);
    expect(slow.loop.stats().activeBlocks).toBe(0);
  });
});
