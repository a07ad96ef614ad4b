/**
 * The live planner: one `tick()` per interval reads an Observation, takes each pool's replica
 * count from the connector (so a change made outside the planner is adopted, never fought),
 * steps the policy, and hands every non-hold decision to the connector. A failed connector call
 * is logged, counted and taken back (`Planner.actionFailed`), so the next interval retries it:
 * nothing a connector or a metrics source throws ends the loop.
 */
import { configuredPools } from '../policy/config.js';
import type { PoolConnector, ObservationSource } from '../policy/connector.js';
import type { Decision } from '../policy/decision.js';
import type { Observation, PoolName } from '../policy/observation.js';
import type { Planner } from '../policy/planner.js';
import { ConnectorError } from '../connectors/errors.js';
import type { PlannerMetrics } from './metrics.js';

export type LoopLog = (level: 'info' | 'warn', msg: string, fields: Record<string, unknown>) => void;

export interface PlannerLoopOptions {
  planner: Planner;
  source: ObservationSource;
  connector: PoolConnector;
  metrics?: PlannerMetrics;
  log?: LoopLog;
  /** Told after every interval's step (the dashboard's planner_status publisher). */
  onStep?: (obs: Observation, decisions: readonly Decision[]) => void;
}

export class PlannerLoop {
  /** Connector (and source) failures so far. */
  errors = 0;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private readonly pools: PoolName[];
  /** Replicas the planner last saw or ordered per pool: a read that differs is someone else's change. */
  private readonly expected = new Map<PoolName, number>();

  constructor(private readonly o: PlannerLoopOptions) {
    this.pools = configuredPools(o.planner.config);
  }

  /** One interval. Resolves with the decisions (empty when no observation could be made). */
  async tick(): Promise<Decision[]> {
    let obs: Observation;
    try {
      obs = await this.o.source.observe();
      for (const pool of this.pools) {
        const replicas = await this.o.connector.replicas(pool);
        const expected = this.expected.get(pool);
        if (expected !== undefined && expected !== replicas) {
          this.o.planner.externalChange(pool);
          this.o.log?.('info', 'planner: replicas changed outside the planner: adopting', { pool, expected, now: replicas });
        }
        this.expected.set(pool, replicas);
        const seen = obs.pools[pool] ?? { replicas, ready: 0, queuedPrefillTokens: 0, kvUsage: 0 };
        obs.pools[pool] = { ...seen, replicas, ready: Math.min(seen.ready, replicas) };
      }
    } catch (err) {
      this.failed('all', err, 'observe');
      return [];
    }
    const decisions = this.o.planner.step(obs);
    for (const d of decisions) {
      this.o.metrics?.record(d);
      if (d.action === 'hold') continue;
      this.o.log?.('info', 'planner decision', { pool: d.pool, action: d.action, current: d.current, target: d.target, rule: d.rule, limitedBy: d.limitedBy, reason: d.reason });
      try {
        await this.o.connector.scale(d.pool, d.target, d);
        this.expected.set(d.pool, d.target);
      } catch (err) {
        this.o.planner.actionFailed(d.pool);
        this.failed(d.pool, err, `scale to ${d.target}`);
      }
    }
    this.o.onStep?.(obs, decisions);
    return decisions;
  }

  /** Ticks every intervalS seconds; a tick never overlaps the previous one. */
  start(): void {
    const everyMs = this.o.planner.config.intervalS * 1000;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.tick().finally(() => (this.running = undefined));
    }, everyMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private failed(pool: PoolName | 'all', err: unknown, what: string): void {
    this.errors++;
    const kind = err instanceof ConnectorError ? err.kind : 'other';
    this.o.metrics?.connectorError(pool, kind);
    this.o.log?.('warn', `planner: ${what} failed; retrying next interval`, { pool, kind, err: (err as Error).message });
  }
}
