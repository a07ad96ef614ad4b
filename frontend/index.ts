/** Public surface of the frontend. */
export { AdmissionGate } from './admission.js';
export { CodecCache, type ChatMessage, type CodecLoader, type ModelCodec, type TextDetokenizer, type DetokenizerStep } from './codec.js';
export { registerFrontendCommand, type FrontendFlags } from './command.js';
export { ApiError, STATUS_TABLE, errorBody, toApiError, type ApiErrorCode } from './errors.js';
export { FRONTEND_DEFAULTS, startFrontend, type FrontendHandle, type FrontendOptions, type FrontendRuntime } from './frontend.js';
export { FrontendMetrics } from './metrics.js';
export { ModelCatalog, type CatalogChange } from './model-catalog.js';
export { ModelWatcher, type ServedModel } from './model-watcher.js';
export { DIRECT_ROUTE_HEADER, GenerationPipeline } from './pipeline/generation.js';
export { selectInstance, streamWithMigration } from './pipeline/migration.js';
export {
  DirectSelector,
  RandomSelector,
  ROUTER_MODES,
  RoundRobinSelector,
  createSelector,
  type RouteRequest,
  type RouterMode,
  type WorkerSelector,
} from './routing.js';
export { EndpointWorkerClient, runtimeConnector, type WorkerClient, type WorkerConnector } from './worker-client.js';
export { WorkerClients, endpointKey } from './worker-clients.js';
export { WorkerHealth } from './worker-health.js';
export { HfCodec, hfCodecLoader } from './hf-codec.js';
export { parseChatRequest, parseCompletionRequest, type GenerationRequest } from './openai/validate.js';
