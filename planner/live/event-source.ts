/**
 * The live ObservationSource: per-pool load from the workers' `load_metrics` on the event
 * plane, readiness from discovery (a worker is ready while its `generate` instance is
 * registered), traffic from the frontend's /metrics. `replicas` is left for the loop to take
 * from the connector.
 *
 * Workers publish `load_metrics` after their scheduler steps, and repeat their current load every
 * second when no step reported (proto/wire.ts `LOAD_REPORT_HEARTBEAT_MS`), so an idle worker's
 * samples say idle. A registered worker that sent nothing during the interval is counted as idle
 * (queue 0, KV 0), not "still at its last value".
 */
import { TOPICS } from '../../proto/wire.js';
import { instancePrefix, type Component, type DistributedRuntime, type Subscription } from '../../runtime/index.js';
import type { ObservationSource } from '../policy/connector.js';
import type { Observation, PoolName, PoolObservation, TrafficObservation } from '../policy/observation.js';
import { FrontendTraffic } from './frontend-traffic.js';

/** The component each pool's workers serve under (workers/ COMPONENT_FOR_ROLE). */
export const POOL_COMPONENT: Record<PoolName, string> = { agg: 'backend', prefill: 'prefill', decode: 'decode' };

interface WorkerLoad {
  kvSum: number;
  samples: number;
  queuedPrefillTokens: number;
}

interface LoadSample {
  workerId: string;
  kvUsage: number;
  queuedPrefillTokens: number;
}

export interface LiveSourceOptions {
  runtime: DistributedRuntime;
  namespace: string;
  pools: PoolName[];
  /** The frontend's /metrics URL; absent: no traffic (load mode needs none). */
  frontendMetricsUrl?: string;
  intervalS: number;
}

export class LiveObservationSource implements ObservationSource {
  private readonly interval = new Map<PoolName, Map<string, WorkerLoad>>();
  private readonly subs: Subscription[] = [];
  private readonly traffic: FrontendTraffic | undefined;

  private constructor(private readonly o: LiveSourceOptions) {
    this.traffic = o.frontendMetricsUrl ? new FrontendTraffic(o.frontendMetricsUrl) : undefined;
  }

  static async start(o: LiveSourceOptions): Promise<LiveObservationSource> {
    const s = new LiveObservationSource(o);
    for (const pool of o.pools) {
      s.interval.set(pool, new Map());
      const component: Component = o.runtime.namespace(o.namespace).component(POOL_COMPONENT[pool]);
      s.subs.push(await component.subscribe<LoadSample>(TOPICS.loadMetrics, (e) => s.onLoad(pool, e.payload)));
    }
    return s;
  }

  private onLoad(pool: PoolName, m: LoadSample): void {
    if (typeof m?.workerId !== 'string') return;
    const byWorker = this.interval.get(pool)!;
    const w = byWorker.get(m.workerId) ?? { kvSum: 0, samples: 0, queuedPrefillTokens: 0 };
    w.kvSum += Number(m.kvUsage) || 0;
    w.samples++;
    w.queuedPrefillTokens = Number(m.queuedPrefillTokens) || 0;
    byWorker.set(m.workerId, w);
  }

  async observe(): Promise<Observation> {
    const nowMs = Date.now();
    const pools: Observation['pools'] = {};
    for (const pool of this.o.pools) {
      const records = await this.o.runtime.discovery.list(instancePrefix(this.o.namespace, POOL_COMPONENT[pool], 'generate'));
      const ready = new Set(records.map((r) => r.key.slice(r.key.lastIndexOf('/') + 1)));
      const loads = this.interval.get(pool)!;
      let kv = 0;
      let queued = 0;
      for (const id of ready) {
        const w = loads.get(id);
        if (!w) continue; // idle all interval
        kv += w.kvSum / w.samples;
        queued += w.queuedPrefillTokens;
      }
      loads.clear();
      const p: PoolObservation = { replicas: ready.size, ready: ready.size, queuedPrefillTokens: queued, kvUsage: ready.size > 0 ? kv / ready.size : 0 };
      pools[pool] = p;
    }
    let traffic: TrafficObservation = { requests: 0, intervalS: this.o.intervalS };
    if (this.traffic) traffic = await this.traffic.observe(nowMs, this.o.intervalS);
    return { nowMs, traffic, pools };
  }

  async close(): Promise<void> {
    await Promise.all(this.subs.map((s) => s.close().catch(() => undefined)));
  }
}
