/**
 * Event-plane messages the frontend's dashboard listens to (proto/events.md). Both are
 * fire-and-forget and only informational: losing one loses a line on the dashboard, nothing else.
 */

export const DASHBOARD_TOPICS = {
  /** A standalone `runtime router` publishes each routing decision, on its own component. */
  routerDecisions: 'router_decisions',
  /** The planner publishes its state and decisions, on component `planner`. */
  plannerStatus: 'planner_status',
} as const;

/** Component the planner publishes `planner_status` on. */
export const PLANNER_COMPONENT = 'planner';

/** One candidate worker's line in a routing decision. */
export interface RouterDecisionCandidate {
  instanceId: string;
  overlapBlocks: number;
  cost: number;
  /** `--router-cost latency`: the calibrated predictions behind `cost` (ms). */
  predictedTtftMs?: number;
  predictedItlMs?: number;
}

/** Payload of `router_decisions`: one routed request. */
export interface RouterDecisionEvent {
  requestId: string;
  /** The router component's model target (component name). */
  component: string;
  instanceId: string;
  promptBlocks: number;
  candidates: RouterDecisionCandidate[];
  timestampMs: number;
}

export interface PlannerLoadTriple {
  rate: number;
  isl: number;
  osl: number;
}

export interface PlannerPoolStatus {
  name: string;
  current: number;
  desired: number;
}

export interface PlannerDecision {
  pool: string;
  from: number;
  to: number;
  reason: string;
}

/** Payload of `planner_status`: sent once per planner interval. */
export interface PlannerStatusEvent {
  timestampMs: number;
  predicted?: PlannerLoadTriple;
  observed?: PlannerLoadTriple;
  pools: PlannerPoolStatus[];
  /** Scaling decisions made this interval (empty when nothing changed). */
  decisions: PlannerDecision[];
}
