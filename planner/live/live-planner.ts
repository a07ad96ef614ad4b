/**
 * Wires the live planner: the policy core, the live observation source (event plane + frontend
 * /metrics), a connector and the `tandem_planner_*` metrics on the runtime's registry (served by
 * its status server), then ticks every `intervalS`. Used by `runtime planner` and
 * `runtime up --planner`.
 */
import type { PerfModel } from '../../perf-model/index.js';
import type { DistributedRuntime } from '../../runtime/index.js';
import type { PlannerConfig } from '../policy/config.js';
import type { PoolConnector } from '../policy/connector.js';
import { Planner } from '../policy/planner.js';
import { configuredPools } from '../policy/config.js';
import { LiveObservationSource } from './event-source.js';
import { PlannerLoop, type LoopLog } from './loop.js';
import { PlannerMetrics } from './metrics.js';
import { plannerStatusEvent, PlannerStatusPublisher } from './status-publisher.js';

export interface LivePlannerOptions {
  config: PlannerConfig;
  perf: PerfModel;
  runtime: DistributedRuntime;
  namespace: string;
  connector: PoolConnector;
  frontendMetricsUrl?: string;
  log?: LoopLog;
}

export interface LivePlanner {
  readonly loop: PlannerLoop;
  readonly metrics: PlannerMetrics;
  stop(): Promise<void>;
}

export async function startLivePlanner(o: LivePlannerOptions): Promise<LivePlanner> {
  const pools = configuredPools(o.config);
  const source = await LiveObservationSource.start({ runtime: o.runtime, namespace: o.namespace, pools, intervalS: o.config.intervalS, ...(o.frontendMetricsUrl ? { frontendMetricsUrl: o.frontendMetricsUrl } : {}) });
  const metrics = new PlannerMetrics(o.runtime.metrics);
  const planner = new Planner(o.config, o.perf);
  const status = await PlannerStatusPublisher.start(o.runtime, o.namespace);
  const loop = new PlannerLoop({
    planner,
    source,
    connector: o.connector,
    metrics,
    ...(o.log ? { log: o.log } : {}),
    onStep: (obs, decisions) => status.publish(plannerStatusEvent(obs, decisions, planner.prediction())),
  });
  loop.start();
  return {
    loop,
    metrics,
    async stop() {
      await loop.stop();
      await source.close();
      await status.close();
    },
  };
}
