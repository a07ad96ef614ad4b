/** Public surface of the router adapters (everything of the KV router that does I/O). */
export { KvRouterService, KV_ROUTER_SERVICE_DEFAULTS, type KvRouterServiceOptions } from './kv-router-service.js';
export { KvRouterHub, DEFAULT_SYNC_COMPONENT, type KvRouterHubOptions, type DecisionListener } from './kv-router-hub.js';
export { LoadFeed, type LoadListener } from './load-feed.js';
export { LocalKvBackend, RemoteKvBackend, type KvRoutingBackend, type KvRouteOutcome } from './kv-routing-backend.js';
export { parseRouterCall } from './route-protocol.js';
export { startRouterServer, type RouterServerOptions, type RunningRouter } from './router-server.js';
export { registerRouterCommand } from './router-command.js';
export { addKvRouterOptions, kvRouterConfigFromFlags, loadKvRouterConfig, KV_ROUTER_FLAG_DEFAULTS, type KvRouterFlags } from './kv-router-options.js';
export { RouterMetrics } from './router-metrics.js';
export { decisionCandidates } from './decision-candidates.js';
