/**
 * The two edges the live planner (live/loop.ts) plugs in: where observations come from
 * (live/event-source.ts) and who carries out a decision (connectors/: local, virtual,
 * kubernetes; the simulator applies targets itself). The policy core needs neither: the
 * simulator drives `Planner.step` directly. test/planner/pool-connector.contract.ts checks every
 * connector against this one contract.
 *
 *   loop every intervalS:  obs = await source.observe()
 *                          for d of planner.step(obs) if d.action !== 'hold': await connector.scale(d.pool, d.target, d)
 */
import type { Decision } from './decision.js';
import type { Observation, PoolName } from './observation.js';

/** Produces one Observation per planner interval (event plane + frontend metrics, or a replay). */
export interface ObservationSource {
  observe(): Promise<Observation>;
}

/**
 * Carries out decisions on one deployment. `scale` resolves once the change is accepted (not
 * once workers are ready: readiness shows up in the next Observation's `ready`). A connector
 * that finds replicas changed outside the planner reports the new count through `replicas`
 * and the planner adopts it.
 */
export interface PoolConnector {
  readonly kind: 'local' | 'virtual' | 'kubernetes' | 'simulated';
  replicas(pool: PoolName): Promise<number>;
  scale(pool: PoolName, target: number, decision: Decision): Promise<void>;
}
