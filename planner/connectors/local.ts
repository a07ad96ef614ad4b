/**
 * The local connector: a pool is a set of `runtime worker` processes on this machine. Scaling up
 * starts new ones through the caller's launcher (in `runtime up`, the process supervisor, which
 * restarts a crashed worker); scaling down stops the newest ones with SIGTERM, and a stopping
 * worker drains: it leaves discovery so nothing new is routed to it, finishes every stream in
 * flight, then exits (SIGKILL only after the launcher's grace). `replicas` counts live workers,
 * starting ones included and draining ones not.
 */
import type { PoolConnector } from '../policy/connector.js';
import type { Decision } from '../policy/decision.js';
import type { PoolName } from '../policy/observation.js';
import { ConnectorError } from './errors.js';

/** A worker the launcher started; `stop` resolves once it has exited. */
export interface LocalWorker {
  readonly name: string;
  stop(): Promise<unknown>;
}

/** Starts one `runtime worker` of a pool under a unique name (`agg-3`). */
export type LocalLauncher = (pool: PoolName, name: string) => LocalWorker;

export class LocalConnector implements PoolConnector {
  readonly kind = 'local' as const;
  private readonly live = new Map<PoolName, LocalWorker[]>();
  private readonly draining = new Set<Promise<unknown>>();
  private readonly nextIndex = new Map<PoolName, number>();

  constructor(
    private readonly launch: LocalLauncher,
    /** Workers already running (started by `runtime up` before the planner), per pool. */
    initial: Partial<Record<PoolName, LocalWorker[]>> = {},
    private readonly log?: (msg: string, fields: Record<string, unknown>) => void,
  ) {
    for (const [pool, workers] of Object.entries(initial) as [PoolName, LocalWorker[]][]) {
      this.live.set(pool, [...workers]);
      this.nextIndex.set(pool, workers.length);
    }
  }

  async replicas(pool: PoolName): Promise<number> {
    return this.live.get(pool)?.length ?? 0;
  }

  /** Names of the pool's live workers, oldest first. */
  workers(pool: PoolName): string[] {
    return (this.live.get(pool) ?? []).map((w) => w.name);
  }

  async scale(pool: PoolName, target: number, decision: Decision): Promise<void> {
    const live = this.live.get(pool) ?? [];
    this.live.set(pool, live);
    while (live.length < target) {
      const index = this.nextIndex.get(pool) ?? 0;
      this.nextIndex.set(pool, index + 1);
      const name = `${pool}-${index}`;
      try {
        live.push(this.launch(pool, name));
      } catch (err) {
        throw new ConnectorError('local', 'unreachable', `cannot start ${name}: ${(err as Error).message}`, undefined, { cause: err });
      }
      this.log?.('worker started', { pool, name, rule: decision.rule });
    }
    while (live.length > target) {
      const w = live.pop()!; // newest first: the oldest have the warmest prefix caches
      this.log?.('worker draining', { pool, name: w.name, rule: decision.rule });
      const done = w.stop().finally(() => this.draining.delete(done));
      this.draining.add(done);
    }
  }

  /** Every worker this connector stopped has exited. */
  async drained(): Promise<void> {
    await Promise.allSettled([...this.draining]);
  }

  /** Workers live now, for whoever shuts the fleet down. */
  allWorkers(): string[] {
    return [...this.live.values()].flat().map((w) => w.name);
  }
}
