/**
 * The gRPC service of proto/request_plane.proto as grpc-js method definitions with raw-Buffer
 * serializers. The server writes pre-framed Buffers (see codec.ts), so its response serializer
 * is the identity; the client's deserializer unpacks a batch into its items.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import { decodeBatch, decodeRequest, decodeSubscribe, encodeRequest, encodeSubscribe, type WireRequest } from './codec.js';

export const SERVICE_NAME = 'tandem.request_plane.v1.RequestPlane';

const identity = (buf: Buffer): Buffer => buf;

export const GENERATE_METHOD = {
  path: `/${SERVICE_NAME}/Generate`,
  requestStream: false,
  responseStream: true,
  requestSerialize: (request: WireRequest): Buffer => encodeRequest(request),
  requestDeserialize: decodeRequest,
  responseSerialize: identity,
  responseDeserialize: decodeBatch,
} as const;

export const SUBSCRIBE_METHOD = {
  path: `/${SERVICE_NAME}/Subscribe`,
  requestStream: false,
  responseStream: true,
  requestSerialize: encodeSubscribe,
  requestDeserialize: decodeSubscribe,
  responseSerialize: identity,
  responseDeserialize: decodeBatch,
} as const;

export const REQUEST_PLANE_SERVICE: ServiceDefinition = {
  Generate: GENERATE_METHOD,
  Subscribe: SUBSCRIBE_METHOD,
} as unknown as ServiceDefinition;

/** 64 MiB both ways unless configured. */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
