/**
 * The frontend's narrow view of workers: "which instances serve this endpoint" and "stream a
 * preprocessed request from that one instance". Routing decisions are made by the frontend
 * (routing.ts), so a client here only ever sends to an explicit instance. The runtime adapter
 * below wraps the runtime's EndpointClient; tests plug in in-process fakes.
 */
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../proto/wire.js';
import type { CallOptions, RoutingChoice } from '../runtime/index.js';

export interface WorkerClient {
  /** Instances that currently serve the endpoint (discovery instance records). */
  instanceIds(): readonly InstanceId[];
  /**
   * Stream one request from one instance. A dead or unreachable worker surfaces as an error
   * with code 'unavailable'; `signal` cancels the worker stream.
   */
  generate(request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta>;
  /**
   * The same call for an endpoint that is not `generate` (`kv_release`): the caller names the
   * request and answer types of that endpoint's protocol (proto/).
   */
  call<Req, Resp>(request: Req, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<Resp>;
  close(): void;
}

/** Opens a client for `component/endpoint` in the frontend's namespace. */
export interface WorkerConnector {
  connect(component: string, endpoint: string): Promise<WorkerClient>;
}

/** The slice of the runtime's EndpointClient this adapter needs. */
export interface EndpointClientLike {
  instanceIds(): InstanceId[];
  generate<Req, Resp>(request: Req, options?: CallOptions & { routing?: RoutingChoice }): AsyncIterable<Resp>;
  close(): void;
}

/** The slice of DistributedRuntime the frontend needs. */
export interface RuntimeLike {
  namespace(name?: string): { component(name: string): { endpoint(name: string): { client(): Promise<EndpointClientLike> } } };
}

export class EndpointWorkerClient implements WorkerClient {
  constructor(private readonly client: EndpointClientLike) {}

  instanceIds(): readonly InstanceId[] {
    return this.client.instanceIds();
  }

  generate(request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta> {
    return this.client.generate<PreprocessedRequest, TokenDelta>(request, {
      signal,
      requestId: request.requestId,
      routing: { mode: 'direct', instanceId },
    });
  }

  call<Req, Resp>(request: Req, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<Resp> {
    return this.client.generate<Req, Resp>(request, { signal, routing: { mode: 'direct', instanceId } });
  }

  close(): void {
    this.client.close();
  }
}

export function runtimeConnector(runtime: RuntimeLike, namespace: string): WorkerConnector {
  return {
    async connect(component, endpoint) {
      const client = await runtime.namespace(namespace).component(component).endpoint(endpoint).client();
      return new EndpointWorkerClient(client);
    },
  };
}
