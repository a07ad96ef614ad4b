/**
 * KV tier metrics on `/metrics` (`tandem_worker_kv_tier_*`), read from the tier manager on each
 * scrape: occupancy and capacity per tier, blocks and bytes offloaded and onboarded per tier,
 * prefix tokens served per tier, onboard failures and disk errors. Rates are `rate()` of the
 * totals.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { KvTierManager, KvTierStats } from '../kv-tiers/index.js';

type Tier = 'host' | 'disk';

export class KvTierMetrics {
  constructor(registry: Registry, model: string, tiers: KvTierManager, blockSize: number) {
    const base = { model_name: model };
    const read = (): KvTierStats => tiers.stats();
    const gauge = (name: string, help: string, value: (s: KvTierStats, tier: Tier) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['model_name', 'tier'],
        registers: [registry],
        collect() {
          const s = read();
          for (const tier of ['host', 'disk'] as const) this.set({ ...base, tier }, value(s, tier));
        },
      });
    gauge('tandem_worker_kv_tier_blocks', 'KV blocks held in a tier below the engine pool', (s, t) => (t === 'host' ? s.hostBlocks : s.diskBlocks));
    gauge('tandem_worker_kv_tier_capacity_blocks', 'KV blocks a tier below the engine pool can hold', (s, t) => (t === 'host' ? s.hostCapacityBlocks : s.diskCapacityBlocks));

    // Totals: each counter advances on scrape by what the manager's running totals moved since.
    const counter = (name: string, help: string, value: (s: KvTierStats) => Partial<Record<Tier, number>>, labelled = true) => {
      const prev: Partial<Record<Tier, number>> = {};
      return new Counter({
        name,
        help,
        labelNames: labelled ? ['model_name', 'tier'] : ['model_name'],
        registers: [registry],
        collect() {
          for (const [tier, v] of Object.entries(value(read())) as Array<[Tier, number]>) {
            const delta = v - (prev[tier] ?? 0);
            if (delta > 0) this.inc(labelled ? { ...base, tier } : base, delta);
            prev[tier] = v;
          }
        },
      });
    };
    counter('tandem_worker_kv_tier_offload_blocks_total', 'KV blocks written into a tier (host: evicted from the pool; disk: pushed out of host)', (s) => ({ host: s.offloadBlocks, disk: s.diskWriteBlocks }));
    counter('tandem_worker_kv_tier_offload_bytes_total', 'KV bytes written into a tier', (s) => ({ host: s.offloadBytes, disk: s.diskWriteBytes }));
    counter('tandem_worker_kv_tier_onboard_blocks_total', 'KV blocks copied from a tier back into the engine pool', (s) => ({ host: s.onboardHostBlocks, disk: s.onboardDiskBlocks }));
    counter('tandem_worker_kv_tier_hit_tokens_total', 'Prompt tokens served from a tier instead of recomputed', (s) => ({ host: s.onboardHostBlocks * blockSize, disk: s.onboardDiskBlocks * blockSize }));
    counter('tandem_worker_kv_tier_onboard_bytes_total', 'KV bytes copied from the tiers into the engine pool', (s) => ({ host: s.onboardBytes }), false);
    counter('tandem_worker_kv_tier_onboard_failures_total', 'Onboards that failed (bad or missing disk block): the prompt was recomputed', (s) => ({ host: s.onboardFailures }), false);
    counter('tandem_worker_kv_tier_disk_errors_total', 'Disk tier errors: failed writes (ENOSPC, a deleted directory), unreadable or corrupt block files', (s) => ({ disk: s.diskErrors }), false);
  }
}
