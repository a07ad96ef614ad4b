/** The tier metrics a worker exports, read from a mocker EngineLoop whose prefix came back from G2. */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import type { PreprocessedRequest } from '../../proto/wire.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { createKvTiers, simulatedTierTarget } from '../../workers/kv-tiers/index.js';
import { KvTierMetrics } from '../../workers/process/kv-tier-metrics.js';
import { range } from './builders.js';

const BS = 16;

describe('KvTierMetrics', () => {
  it('reports tier occupancy, offloaded and onboarded blocks, and hit tokens per tier', async () => {
    const bytes = 131072 * BS;
    const tiers = (await createKvTiers({ hostCacheBytes: 64 * bytes }, simulatedTierTarget(bytes, 1000, new PolynomialPerfModel())))!;
    const loop = new EngineLoop({ engine: new MockerEngine({ numBlocks: 24, blockSize: BS, speedupRatio: 1000 }), kvTiers: tiers });
    const registry = new Registry();
    new KvTierMetrics(registry, 'm', tiers, BS);
    const run = async (id: string, prompt: number[]) => {
      const req: PreprocessedRequest = { requestId: id, model: 'm', tokenIds: prompt, sampling: {}, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
      let cached = -1;
      for await (const d of loop.generate(req, new AbortController().signal)) if (d.usage) cached = d.usage.cachedTokens;
      return cached;
    };
    const prompt = range(1, 8 * BS + 1);
    await run('a', prompt);
    for (let i = 0; i < 3; i++) await run(`f${i}`, range(1000 * (i + 1), 12 * BS));
    expect(await run('b', prompt)).toBe(8 * BS);
    const text = await registry.metrics();
    const value = (name: string, labels: string) => Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(value('tandem_worker_kv_tier_onboard_blocks_total', 'model_name="m",tier="host"')).toBe(8);
    expect(value('tandem_worker_kv_tier_hit_tokens_total', 'model_name="m",tier="host"')).toBe(8 * BS);
    expect(value('tandem_worker_kv_tier_offload_blocks_total', 'model_name="m",tier="host"')).toBeGreaterThanOrEqual(8);
    expect(value('tandem_worker_kv_tier_onboard_bytes_total', 'model_name="m"')).toBe(8 * bytes);
    expect(value('tandem_worker_kv_tier_capacity_blocks', 'model_name="m",tier="host"')).toBe(64);
    expect(value('tandem_worker_kv_tier_blocks', 'model_name="m",tier="host"')).toBeGreaterThan(0);
    // A second scrape does not count again.
    const again = await registry.metrics();
    expect(Number(/^tandem_worker_kv_tier_onboard_blocks_total\{model_name="m",tier="host"\} (\S+)$/m.exec(again)?.[1])).toBe(8);
    await loop.close();
  });
});
