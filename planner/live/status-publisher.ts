/**
 * Publishes the planner's state once per interval as `planner_status` on `{ns}/planner`
 * (proto/dashboard.ts), for the frontends' dashboards: predicted against observed load, current
 * and desired replicas per pool, and the interval's non-hold decisions with their reasons.
 * Fire-and-forget: a lost message costs a dashboard line, never a planner step.
 *
 * With the direct event plane a subscriber hears only processes registered under the topic's
 * component, so the publisher also serves a no-op `status_peer` endpoint there.
 */
import { DASHBOARD_TOPICS, PLANNER_COMPONENT, type PlannerStatusEvent } from '../../proto/wire.js';
import type { DistributedRuntime, ServedEndpoint } from '../../runtime/index.js';
import type { Decision, Prediction } from '../policy/decision.js';
import type { Observation } from '../policy/observation.js';

export const PLANNER_PRESENCE_ENDPOINT = 'status_peer';

/** Pure: the event for one interval. */
export function plannerStatusEvent(obs: Observation, decisions: readonly Decision[], prediction: Prediction | undefined): PlannerStatusEvent {
  const t = obs.traffic;
  const event: PlannerStatusEvent = {
    timestampMs: obs.nowMs,
    pools: decisions.map((d) => ({ name: d.pool, current: d.current, desired: d.target })),
    decisions: decisions.filter((d) => d.action !== 'hold').map((d) => ({ pool: d.pool, from: d.current, to: d.target, reason: d.reason })),
  };
  const p = prediction ?? decisions.find((d) => d.prediction !== undefined)?.prediction;
  if (p) event.predicted = { rate: p.rate, isl: p.isl, osl: p.osl };
  if (t.intervalS > 0) event.observed = { rate: t.requests / t.intervalS, isl: t.meanIsl ?? 0, osl: t.meanOsl ?? 0 };
  return event;
}

export class PlannerStatusPublisher {
  private constructor(
    private readonly runtime: DistributedRuntime,
    private readonly namespace: string,
    private readonly presence: ServedEndpoint | undefined,
  ) {}

  static async start(runtime: DistributedRuntime, namespace: string): Promise<PlannerStatusPublisher> {
    let presence: ServedEndpoint | undefined;
    try {
      presence = await runtime.namespace(namespace).component(PLANNER_COMPONENT).endpoint(PLANNER_PRESENCE_ENDPOINT).serve(async function* () {
        // Presence only: lets direct-plane subscribers find this process's planner_status stream.
      });
    } catch {
      presence = undefined; // without it only NATS subscribers hear us; the planner runs on
    }
    return new PlannerStatusPublisher(runtime, namespace, presence);
  }

  publish(event: PlannerStatusEvent): void {
    void this.runtime.namespace(this.namespace).component(PLANNER_COMPONENT).publish(DASHBOARD_TOPICS.plannerStatus, event).catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.presence?.stop().catch(() => undefined);
  }
}
