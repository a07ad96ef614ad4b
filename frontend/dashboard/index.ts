/** Public surface of the frontend's dashboard (`/dashboard`). */
export { startDashboard, type Dashboard, type DashboardDeps, type DashboardOptions } from './dashboard.js';
export { DashboardState, type FrontendInfo, type RequestStart, type RequestEnd, type LoadSample } from './dashboard-state.js';
export { DashboardEventStream, type EventStreamOptions, type EventStreamStats, type SnapshotSource } from './event-stream.js';
export { handleDashboard, refusedPageLoad, type DashboardRoutes } from './routes.js';
export { dashboardKey, isDashboardPath, isOpenDashboardPath, DASHBOARD_COOKIE, DASHBOARD_KEY_PARAM } from './dashboard-auth.js';
export * from './snapshot.js';
