/**
 * The tiers' part of a worker's load report (`LoadMetrics.tiers`), read from a mocker EngineLoop
 * whose prefix went out of its pool into G2 and came back: occupancy now, and the prompt tokens
 * served per tier since start. A loop without tiers sends no `tiers` (older readers see nothing new).
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import type { LoadMetrics, PreprocessedRequest } from '../../proto/wire.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { createKvTiers, simulatedTierTarget } from '../../workers/kv-tiers/index.js';
import { range } from './builders.js';

const BS = 16;

async function run(loop: EngineLoop, id: string, prompt: number[]): Promise<void> {
  const req: PreprocessedRequest = { requestId: id, model: 'm', tokenIds: prompt, sampling: {}, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
  for await (const d of loop.generate(req, new AbortController().signal)) if (d.finishReason) break;
}

describe('load report with KV tiers', () => {
  it('carries host occupancy and hit tokens per tier once a prefix came back from G2; every published report has them', async () => {
    const bytes = 131072 * BS;
    const tiers = (await createKvTiers({ hostCacheBytes: 64 * bytes }, simulatedTierTarget(bytes, 1000, new PolynomialPerfModel())))!;
    const published: LoadMetrics[] = [];
    const loop = new EngineLoop({ engine: new MockerEngine({ numBlocks: 24, blockSize: BS, speedupRatio: 1000 }), kvTiers: tiers, sinks: { onLoadMetrics: (m) => published.push(m) } });
    const prompt = range(1, 8 * BS + 1);
    await run(loop, 'a', prompt);
    // Onboard costs before any onboard: the bandwidths' figures (2 MiB at 25 GB/s host, 3 GB/s
    // disk) against the perf model's recompute of 16 tokens after 1024 (0.2568 ms).
    expect(loop.loadMetrics().tiers).toEqual({
      hostBlocks: 0,
      hostCapacity: 64,
      diskBlocks: 0,
      diskCapacity: 0,
      queryTokens: 8 * BS + 1,
      hitTokens: { device: 0, host: 0, disk: 0 },
      onboardMsPerBlock: { host: expect.closeTo(0.0839, 3), disk: expect.closeTo(0.699, 3) },
      recomputeMsPerBlock: expect.closeTo(0.2568, 3),
    });
    for (let i = 0; i < 3; i++) await run(loop, `f${i}`, range(1000 * (i + 1), 12 * BS));
    await run(loop, 'b', prompt);
    await run(loop, 'c', prompt);
    const t = loop.loadMetrics().tiers!;
    expect(t.hostBlocks).toBeGreaterThanOrEqual(8);
    expect(t.hostCapacity).toBe(64);
    // b onboarded the prompt's 8 full blocks from G2; c found them in the pool.
    expect(t.hitTokens).toEqual({ device: 8 * BS, host: 8 * BS, disk: 0 });
    expect(t.queryTokens).toBe(3 * (8 * BS + 1) + 3 * 12 * BS);
    expect(published.length).toBeGreaterThan(0);
    expect(published.every((m) => m.tiers !== undefined)).toBe(true);
    await loop.close();
  });

  it('a worker without tiers reports none', async () => {
    const published: LoadMetrics[] = [];
    const loop = new EngineLoop({ engine: new MockerEngine({ numBlocks: 24, blockSize: BS, speedupRatio: 1000 }), sinks: { onLoadMetrics: (m) => published.push(m) } });
    await run(loop, 'a', range(1, 3 * BS));
    expect('tiers' in loop.loadMetrics()).toBe(false);
    expect(published.some((m) => 'tiers' in m)).toBe(false);
    await loop.close();
  });
});
