import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import type { Engine, StepBatch, StepResult } from '../../workers/engines/engine.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import type { KvEvent, LoadMetrics, TokenDelta } from '../../proto/wire.js';
import { range, request } from './builders.js';

function mockerLoop(numBlocks: number, speedupRatio = 1e5, extra: Partial<ConstructorParameters<typeof EngineLoop>[0]> = {}): EngineLoop {
  return new EngineLoop({ engine: new MockerEngine({ numBlocks, blockSize: 16, vocabSize: 500, speedupRatio }), ...extra });
}

async function collect(stream: AsyncIterable<TokenDelta>, delayMs = 0): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) {
    out.push(d);
    if (delayMs > 0) await sleep(delayMs);
  }
  return out;
}

const tokensOf = (deltas: TokenDelta[]): number[] => deltas.flatMap((d) => d.tokenIds);

describe('EngineLoop', () => {
  it('streams tokens and ends with finishReason and usage', async () => {
    const loop = mockerLoop(64);
    const deltas = await collect(loop.generate(request('a', range(1, 20), 5), new AbortController().signal));
    const last = deltas[deltas.length - 1]!;
    expect(tokensOf(deltas)).toHaveLength(5);
    expect(last.finishReason).toBe('length');
    expect(last.usage).toEqual({ promptTokens: 20, completionTokens: 5, cachedTokens: 0 });
    expect(deltas.slice(0, -1).every((d) => d.finishReason === undefined)).toBe(true);
    await loop.close();
  });

  it('200 concurrent requests all complete with the right lengths, and blocks return to baseline', async () => {
    const kvEvents: KvEvent[] = [];
    const metrics: LoadMetrics[] = [];
    const loop = mockerLoop(600, 1e5, {
      workerId: '00000000000000aa',
      kvEventCapacity: 1_000_000,
      sinks: { onKvEvents: (e) => kvEvents.push(...e), onLoadMetrics: (m) => metrics.push(m) },
      scheduler: { maxNumSeqs: 64, maxNumBatchedTokens: 2048 },
    });
    const shared = range(1, 64);
    const jobs = Array.from({ length: 200 }, (_, i) => {
      const prompt = [...shared.slice(0, (i * 7) % 64), ...range(1000 + i * 300, 10 + (i % 90))];
      const maxTokens = 1 + ((i * 13) % 40);
      return collect(loop.generate(request(`r${i}`, prompt, maxTokens), new AbortController().signal)).then((d) => ({ d, maxTokens }));
    });
    const results = await Promise.all(jobs);
    for (const { d, maxTokens } of results) {
      expect(tokensOf(d)).toHaveLength(maxTokens);
      expect(d[d.length - 1]!.usage!.completionTokens).toBe(maxTokens);
    }
    const stats = loop.stats();
    expect(stats).toMatchObject({ numRunning: 0, numWaiting: 0, activeBlocks: 0, kvUsage: 0, numActiveRequests: 0, numRequestsTotal: 200 });
    expect(stats.prefixCacheHits).toBeGreaterThan(0);
    expect(results.some(({ d }) => d[d.length - 1]!.usage!.cachedTokens > 0)).toBe(true);
    // Sinks saw gap-free events stamped with the worker id, and a metrics snapshot per step.
    expect(kvEvents.map((e) => e.eventId)).toEqual(range(0, kvEvents.length));
    expect(kvEvents.every((e) => e.workerId === '00000000000000aa')).toBe(true);
    expect(metrics.length).toBe(stats.numSteps);
    expect(Math.max(...metrics.map((m) => m.numRunning))).toBeLessThanOrEqual(64);
    expect(metrics[metrics.length - 1]).toMatchObject({ numRunning: 0, activeBlocks: 0, totalBlocks: 600 });
    // Replaying every event rebuilds exactly the worker's cached block set.
    const set = new Set<string>();
    for (const e of kvEvents) {
      if (e.data.type === 'stored') for (const b of e.data.blocks) set.add(b.blockHash);
      else if (e.data.type === 'removed') for (const h of e.data.blockHashes) set.delete(h);
      else set.clear();
    }
    expect(set).toEqual(loop.scheduler.blockManager.cachedBlockHashes());
    await loop.close();
  });

  it('preemption inside the loop does not change any request output', async () => {
    const run = async (numBlocks: number): Promise<{ out: number[][]; preemptions: number }> => {
      const loop = mockerLoop(numBlocks, 1e6);
      const out = await Promise.all(
        range(0, 6).map((i) => collect(loop.generate(request(`p${i}`, range(i * 100, 40), 60), new AbortController().signal)).then(tokensOf)),
      );
      const preemptions = loop.stats().numPreemptions;
      await loop.close();
      return { out, preemptions };
    };
    const roomy = await run(200);
    const tight = await run(14);
    expect(roomy.preemptions).toBe(0);
    expect(tight.preemptions).toBeGreaterThan(0);
    expect(tight.out).toEqual(roomy.out);
  });

  it('abort frees the sequence blocks at once and ends the stream as cancelled', async () => {
    const loop = mockerLoop(64, 50); // decode ≈ 0.1–0.7 ms per step
    const ac = new AbortController();
    const stream = loop.generate(request('a', range(1, 40), 900), ac.signal);
    const first = await stream.next();
    expect(first.done).toBe(false);
    expect(loop.stats().activeBlocks).toBeGreaterThan(0);
    ac.abort();
    expect(loop.stats()).toMatchObject({ activeBlocks: 0, numRunning: 0 });
    const rest: TokenDelta[] = [];
    for (;;) {
      const n = await stream.next();
      if (n.done) break;
      rest.push(n.value);
    }
    expect(rest[rest.length - 1]!.finishReason).toBe('cancelled');
    await loop.idle();
    expect(loop.stats().numActiveRequests).toBe(0);
    await loop.close();
  });

  it('a consumer that stops reading early frees the blocks too', async () => {
    const loop = mockerLoop(64, 1e4);
    for await (const d of loop.generate(request('a', range(1, 40), 500), new AbortController().signal)) {
      expect(d.tokenIds.length).toBeGreaterThan(0);
      break;
    }
    expect(loop.stats()).toMatchObject({ activeBlocks: 0, numRunning: 0, numActiveRequests: 0 });
    await loop.close();
  });

  it('a slow consumer gets coalesced deltas with the same tokens', async () => {
    const fast = mockerLoop(64, 1e5);
    const reference = tokensOf(await collect(fast.generate(request('same', range(1, 30), 200), new AbortController().signal)));
    const slow = mockerLoop(64, 1e5);
    const deltas = await collect(slow.generate(request('same', range(1, 30), 200), new AbortController().signal), 5);
    expect(tokensOf(deltas)).toEqual(reference);
    expect(deltas.length).toBeLessThan(100);
    expect(Math.max(...deltas.map((d) => d.tokenIds.length))).toBeGreaterThan(1);
    expect(deltas[deltas.length - 1]!.finishReason).toBe('length');
    await Promise.all([fast.close(), slow.close()]);
  });

  it('rejects a request that can never fit with a typed error', async () => {
    const loop = mockerLoop(4);
    await expect(collect(loop.generate(request('big', range(1, 100), 10), new AbortController().signal))).rejects.toMatchObject({ code: 'resource_exhausted' });
    await loop.close();
  });

  it('an engine failure ends the affected streams with an internal error and frees their blocks', async () => {
    class FailingEngine implements Engine {
      readonly info = { kind: 'mocker' as const, vocabSize: 10, kvBytesPerToken: 0, numBlocks: 16, blockSize: 16 };
      calls = 0;
      async step(_batch: StepBatch): Promise<StepResult> {
        await sleep(1);
        throw new Error('device lost');
      }
      async close(): Promise<void> {}
    }
    const loop = new EngineLoop({ engine: new FailingEngine() });
    await expect(collect(loop.generate(request('a', range(1, 20), 3), new AbortController().signal))).rejects.toMatchObject({ code: 'internal' });
    expect(loop.stats().activeBlocks).toBe(0);
    await loop.close();
  });

  it('a request cancelled while its step hangs reports the lower load at once, with no step to carry it', async () => {
    let release: (() => void) | undefined;
    class HangingEngine implements Engine {
      readonly info = { kind: 'mocker' as const, vocabSize: 10, kvBytesPerToken: 0, numBlocks: 16, blockSize: 16 };
      step(batch: StepBatch): Promise<StepResult> {
        return new Promise((resolve) => {
          release = () => resolve({ sampled: batch.sequences.map(() => ({ tokenId: 1 })) } as unknown as StepResult);
        });
      }
      async close(): Promise<void> {}
    }
    const reports: LoadMetrics[] = [];
    const loop = new EngineLoop({ engine: new HangingEngine(), sinks: { onLoadMetrics: (m) => reports.push(m) } });
    const ac = new AbortController();
    const stream = loop.generate(request('a', range(1, 20), 5), ac.signal);
    const first = stream.next();
    await sleep(5);
    expect(release).toBeDefined(); // the step is in flight
    expect(reports).toHaveLength(0);
    ac.abort();
    expect((await first).value).toMatchObject({ finishReason: 'cancelled' });
    // The report a dashboard or router would otherwise never get: nothing runs any more.
    expect(reports.at(-1)).toMatchObject({ numRunning: 0, numWaiting: 0, activeBlocks: 0 });
    expect(loop.loadMetrics()).toMatchObject({ numRunning: 0, totalBlocks: 16 });
    release!(); // the step comes back; its result for the aborted sequence is skipped
    await loop.close();
  });

  it('close fails open streams as unavailable so the frontend can migrate them', async () => {
    const loop = mockerLoop(64, 10);
    const outcome = collect(loop.generate(request('a', range(1, 20), 900), new AbortController().signal)).then(
      () => 'completed',
      (err: unknown) => err,
    );
    await sleep(20);
    await loop.close();
    expect(await outcome).toMatchObject({ code: 'unavailable' });
    expect(loop.stats().activeBlocks).toBe(0);
  });
});
