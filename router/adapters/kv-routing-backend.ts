/**
 * `KvRoutingBackend`: what a frontend's KV selector calls, whether the router runs inside the
 * frontend (`LocalKvBackend`, over a `KvRouterHub`) or in standalone replicas
 * (`RemoteKvBackend`, over the `{ns}/router/route` endpoint).
 *
 * `route` picks and books in one step (so concurrent requests see each other's bookings);
 * the lifecycle calls keep the booking right afterwards. Lifecycle calls are fire-and-forget:
 * a lost one is healed by the core's active-sequence TTL.
 */
import type { InstanceId } from '../../proto/wire.js';
import type { DistributedRuntime } from '../../runtime/index.js';
import type { EndpointClient } from '../../runtime/index.js';
import type { RoutingChoice } from '../../runtime/index.js';
import { KvRouterHub } from './kv-router-hub.js';
import { ROUTE_ENDPOINT, ROUTER_COMPONENT, type RouteTarget, type RouterAnswer, type RouterCall } from '../../proto/wire.js';

export type KvRouteOutcome =
  /** `loraPrefetch`: a worker that should load the request's adapter ahead of need. */
  | { kind: 'routed'; instanceId: InstanceId; overlapBlocks: number; loraPrefetch?: InstanceId }
  | { kind: 'all_busy'; retryAfterMs: number }
  | { kind: 'no_candidates' };

export interface KvRouteOptions {
  /** Score without prefix-overlap credit (a decode worker that receives the KV by transfer). */
  noOverlapCredit?: boolean;
  /** Multi-LoRA: hash the prompt under this adapter's lora_id (router/hashing.ts). */
  loraId?: number;
  /** Multi-LoRA: the candidates holding the adapter; the others pay a load penalty. */
  loraResident?: readonly InstanceId[];
}

export interface KvRoutingBackend {
  route(target: RouteTarget, requestId: string, tokens: number[], candidates: readonly InstanceId[], options?: KvRouteOptions): Promise<KvRouteOutcome>;
  book(target: RouteTarget, requestId: string, tokens: number[], instanceId: InstanceId): void;
  firstToken(target: RouteTarget, requestId: string): void;
  /** `outputTokens`, when known, lets the latency cost measure the stream's ITL. */
  finished(target: RouteTarget, requestId: string, outputTokens?: number): void;
  close(): Promise<void>;
}

/** The router in this process. */
export class LocalKvBackend implements KvRoutingBackend {
  constructor(readonly hub: KvRouterHub) {}

  async route(target: RouteTarget, requestId: string, tokens: number[], candidates: readonly InstanceId[], options: KvRouteOptions = {}): Promise<KvRouteOutcome> {
    const service = this.hub.started(target.component) ?? (await this.hub.service(target.component, target.blockSize));
    const result = service.route({ requestId, tokens, ...(options.noOverlapCredit ? { noOverlapCredit: true } : {}), ...(options.loraId !== undefined ? { loraId: options.loraId } : {}), ...(options.loraResident !== undefined ? { loraResident: options.loraResident } : {}) }, candidates);
    if (result.kind === 'routed') {
      this.hub.reportDecision(target.component, result.decision);
      const d = result.decision;
      return { kind: 'routed', instanceId: d.instanceId, overlapBlocks: d.overlapBlocks, ...(d.loraPrefetch !== undefined ? { loraPrefetch: d.loraPrefetch } : {}) };
    }
    return result.kind === 'all_busy' ? { kind: 'all_busy', retryAfterMs: result.retryAfterMs } : { kind: 'no_candidates' };
  }

  book(target: RouteTarget, requestId: string, tokens: number[], instanceId: InstanceId): void {
    const service = this.hub.started(target.component);
    if (service !== undefined) service.bookOn({ requestId, tokens }, instanceId);
    else void this.hub.service(target.component, target.blockSize).then((s) => s.bookOn({ requestId, tokens }, instanceId), () => undefined);
  }

  firstToken(target: RouteTarget, requestId: string): void {
    this.hub.started(target.component)?.firstToken(requestId);
  }

  finished(target: RouteTarget, requestId: string, outputTokens?: number): void {
    this.hub.started(target.component)?.finished(requestId, outputTokens);
  }

  close(): Promise<void> {
    return this.hub.close();
  }
}

/**
 * Standalone replicas. `route` goes to any replica (round-robin); every later call about the
 * same request goes to the replica that answered, in order, so its bookings are exact even
 * without --router-replica-sync.
 */
export class RemoteKvBackend implements KvRoutingBackend {
  /** requestId → the replica that booked it, and the tail of its call chain. */
  private readonly sessions = new Map<string, { replica: InstanceId; chain: Promise<void> }>();

  private constructor(
    private readonly client: EndpointClient,
    private readonly log: DistributedRuntime['logger'],
    private readonly timeoutMs: number,
  ) {}

  static async open(runtime: DistributedRuntime, namespace: string, component = ROUTER_COMPONENT, endpoint = ROUTE_ENDPOINT, timeoutMs = 2_000): Promise<RemoteKvBackend> {
    const client = await runtime.namespace(namespace).component(component).endpoint(endpoint).client();
    return new RemoteKvBackend(client, runtime.logger.child({ router: `${component}/${endpoint}` }), timeoutMs);
  }

  /** Replicas currently listed. */
  replicas(): InstanceId[] {
    return this.client.instanceIds();
  }

  waitForReplicas(count = 1, timeoutMs = 30_000): Promise<void> {
    return this.client.waitForInstances(count, timeoutMs);
  }

  async route(target: RouteTarget, requestId: string, tokens: number[], candidates: readonly InstanceId[], options: KvRouteOptions = {}): Promise<KvRouteOutcome> {
    // A migration re-routes a request whose old booking is still being released: wait for it,
    // or the replica would see the new booking as a duplicate and then free it.
    const previous = this.sessions.get(requestId);
    if (previous !== undefined) await previous.chain;
    const replica = this.client.pick({ mode: 'round-robin' }).instanceId;
    const call: RouterCall = { type: 'route', ...target, requestId, tokens, candidates: [...candidates], ...(options.noOverlapCredit ? { noOverlapCredit: true } : {}), ...(options.loraId !== undefined ? { loraId: options.loraId } : {}), ...(options.loraResident !== undefined ? { loraResident: [...options.loraResident] } : {}) };
    const answer = await this.call(call, replica);
    if (answer.type === 'routed') {
      this.sessions.set(requestId, { replica, chain: Promise.resolve() });
      return { kind: 'routed', instanceId: answer.instanceId, overlapBlocks: answer.overlapBlocks, ...(answer.loraPrefetch !== undefined ? { loraPrefetch: answer.loraPrefetch } : {}) };
    }
    if (answer.type === 'all_busy') return { kind: 'all_busy', retryAfterMs: answer.retryAfterMs };
    return { kind: 'no_candidates' };
  }

  book(target: RouteTarget, requestId: string, tokens: number[], instanceId: InstanceId): void {
    let session = this.sessions.get(requestId);
    if (session === undefined) {
      if (this.client.instances().length === 0) return;
      session = { replica: this.client.pick({ mode: 'round-robin' }).instanceId, chain: Promise.resolve() };
      this.sessions.set(requestId, session);
    }
    this.enqueue(requestId, { type: 'book', ...target, requestId, tokens, instanceId });
  }

  firstToken(target: RouteTarget, requestId: string): void {
    this.enqueue(requestId, { type: 'first_token', ...target, requestId });
  }

  finished(target: RouteTarget, requestId: string, outputTokens?: number): void {
    const session = this.sessions.get(requestId);
    if (session === undefined) return;
    this.enqueue(requestId, { type: 'finished', ...target, requestId, ...(outputTokens !== undefined ? { outputTokens } : {}) });
    const tail = session.chain;
    void tail.then(() => {
      if (this.sessions.get(requestId)?.chain === tail) this.sessions.delete(requestId);
    });
  }

  async close(): Promise<void> {
    await Promise.all([...this.sessions.values()].map((s) => s.chain));
    this.client.close();
  }

  private enqueue(requestId: string, call: RouterCall): void {
    const session = this.sessions.get(requestId);
    if (session === undefined) return;
    session.chain = session.chain.then(() =>
      this.call(call, session.replica).then(
        () => undefined,
        (err: unknown) => this.log.debug({ err, call: call.type, requestId }, 'router lifecycle call failed'),
      ),
    );
  }

  private async call(call: RouterCall, replica: InstanceId): Promise<RouterAnswer> {
    // The replica that booked may be gone: any replica will do (with sync it has the booking).
    const routing: RoutingChoice = this.client.instance(replica) !== undefined ? { mode: 'direct', instanceId: replica } : { mode: 'round-robin' };
    let answer: RouterAnswer | undefined;
    for await (const item of this.client.generate<RouterCall, RouterAnswer>(call, { routing, timeoutMs: this.timeoutMs, requestId: call.requestId })) answer = item;
    if (answer === undefined) throw new Error(`router replica ${replica} gave no answer to ${call.type}`);
    return answer;
  }
}
