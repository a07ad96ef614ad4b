/** The live planner: the interval loop and its metrics. */
export { PlannerLoop, type LoopLog, type PlannerLoopOptions } from './loop.js';
export { PlannerMetrics } from './metrics.js';
export { LiveObservationSource, POOL_COMPONENT, type LiveSourceOptions } from './event-source.js';
export { FrontendTraffic, frontendTotals, trafficBetween } from './frontend-traffic.js';
export { startLivePlanner, type LivePlanner, type LivePlannerOptions } from './live-planner.js';
export { PlannerStatusPublisher, plannerStatusEvent, PLANNER_PRESENCE_ENDPOINT } from './status-publisher.js';
