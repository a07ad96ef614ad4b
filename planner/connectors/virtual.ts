/**
 * The virtual connector: the planner decides, someone else executes. Each non-hold decision is
 * written to the discovery store (etcd, file or memory: any `Discovery`) under an id, and the
 * connector waits for an executor to acknowledge it:
 *
 *   v1/planner/{ns}/decisions/{id}   planner  → { id, pool, target, current, rule, reason, atMs }
 *   v1/planner/{ns}/acks/{id}        executor → { id, ok, replicas?, error? }
 *
 * Both keys live under their writer's lease (they vanish when it dies). The planner deletes a
 * decision once it is acknowledged or timed out. `replicas(pool)` is the count the last ack
 * reported (or the last acknowledged target), so an executor that sizes a pool differently
 * from what was asked is adopted, not fought.
 */
import { randomUUID } from 'node:crypto';
import type { Discovery } from '../../runtime/index.js';
import type { PoolConnector } from '../policy/connector.js';
import type { Decision } from '../policy/decision.js';
import type { PoolName } from '../policy/observation.js';
import { ConnectorError } from './errors.js';

export const decisionsPrefix = (ns: string) => `v1/planner/${ns}/decisions/`;
export const acksPrefix = (ns: string) => `v1/planner/${ns}/acks/`;
export const decisionKey = (ns: string, id: string) => `${decisionsPrefix(ns)}${id}`;
export const ackKey = (ns: string, id: string) => `${acksPrefix(ns)}${id}`;

/** What the planner writes. */
export interface VirtualDecision {
  id: string;
  pool: PoolName;
  target: number;
  current: number;
  rule: string;
  reason: string;
  atMs: number;
}

/** What an executor writes back. */
export interface VirtualAck {
  id: string;
  ok: boolean;
  /** The pool's replicas after carrying it out (default: the target when ok). */
  replicas?: number;
  error?: string;
}

export interface VirtualConnectorOptions {
  discovery: Discovery;
  namespace: string;
  /** How long to wait for an ack before the decision counts as failed (default 30 s). */
  ackTimeoutMs?: number;
  /** Replicas each pool starts with until an ack says otherwise. */
  initial: Partial<Record<PoolName, number>>;
}

export class VirtualConnector implements PoolConnector {
  readonly kind = 'virtual' as const;
  private readonly counts = new Map<PoolName, number>();

  constructor(private readonly o: VirtualConnectorOptions) {
    for (const [pool, n] of Object.entries(o.initial)) this.counts.set(pool as PoolName, n);
  }

  async replicas(pool: PoolName): Promise<number> {
    return this.counts.get(pool) ?? 0;
  }

  async scale(pool: PoolName, target: number, decision: Decision): Promise<void> {
    const { discovery, namespace: ns } = this.o;
    const id = `${decision.atMs}-${pool}-${randomUUID().slice(0, 8)}`;
    const record: VirtualDecision = { id, pool, target, current: decision.current, rule: decision.rule, reason: decision.reason, atMs: decision.atMs };
    let settle!: (ack: VirtualAck) => void;
    const acked = new Promise<VirtualAck>((r) => (settle = r));
    // Watch before writing: an executor that answers at once must not be missed.
    const watch = await discovery.watch<VirtualAck>(ackKey(ns, id), (e) => {
      if (e.type === 'added' && e.key === ackKey(ns, id)) settle(e.value);
    });
    let timer: NodeJS.Timeout | undefined;
    const timeoutMs = this.o.ackTimeoutMs ?? 30_000;
    try {
      await discovery.put(decisionKey(ns, id), record);
      const timedOut = new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), timeoutMs)));
      const ack = await Promise.race([acked, timedOut]);
      if (ack === undefined) throw new ConnectorError('virtual', 'timeout', `decision ${id} (${pool} → ${target}) not acknowledged within ${timeoutMs} ms`);
      if (!ack.ok) throw new ConnectorError('virtual', 'rejected', `decision ${id} (${pool} → ${target}) rejected by the executor: ${ack.error ?? 'no reason given'}`);
      this.counts.set(pool, ack.replicas ?? target);
    } finally {
      if (timer) clearTimeout(timer);
      watch.close();
      await discovery.delete(decisionKey(ns, id)).catch(() => undefined);
    }
  }
}

/**
 * The executor's side, for simulators and tests: watches decisions and acknowledges each with
 * what `execute` returns (the replicas it reached, or throws to reject).
 */
export async function runVirtualExecutor(discovery: Discovery, ns: string, execute: (d: VirtualDecision) => Promise<number> | number): Promise<{ close(): void }> {
  const seen = new Set<string>();
  return discovery.watch<VirtualDecision>(decisionsPrefix(ns), (e) => {
    if (e.type !== 'added' || seen.has(e.value.id)) return;
    const d = e.value;
    seen.add(d.id);
    void (async () => {
      let ack: VirtualAck;
      try {
        ack = { id: d.id, ok: true, replicas: await execute(d) };
      } catch (err) {
        ack = { id: d.id, ok: false, error: (err as Error).message };
      }
      await discovery.put(ackKey(ns, d.id), ack);
    })();
  });
}
