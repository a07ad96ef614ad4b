/** Public surface of the request plane. */
export type * from './types.js';
export { GrpcRequestPlaneServer, type GrpcServerOptions } from './grpc-server.js';
export { GrpcRequestPlaneClient, type GrpcClientOptions } from './grpc-client.js';
export { packr } from './codec.js';
export { DEFAULT_MAX_MESSAGE_BYTES, SERVICE_NAME } from './service.js';
export { TopicHub } from './topic-hub.js';
export { ERROR_CODE_METADATA_KEY } from './wire-errors.js';
export type { ChannelStats } from './channel-pool.js';
export { NGHTTP2_RESET_LIMITS, ResetBudget, type ResetBudgetLimits } from './reset-budget.js';
