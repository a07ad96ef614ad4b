/**
 * A standalone KV router replica: serves `{ns}/router/route` (proto/router.ts) over a
 * `KvRouterHub`, so any number of frontends share one view of worker caches and load.
 * Replicas started with replica sync share their bookings over router_sync.
 */
import type { DistributedRuntime, ServedEndpoint } from '../../runtime/index.js';
import type { RequestContext } from '../../runtime/index.js';
import type { KvRouterConfig } from '../kv-router.js';
import { KvRouterHub, type KvRouterHubOptions } from './kv-router-hub.js';
import { DASHBOARD_TOPICS, ROUTE_ENDPOINT, ROUTER_COMPONENT, type RouterAnswer, type RouterDecisionEvent } from '../../proto/wire.js';
import { parseRouterCall } from './route-protocol.js';
import { decisionCandidates } from './decision-candidates.js';

export interface RouterServerOptions {
  namespace: string;
  router?: Partial<KvRouterConfig>;
  replicaSync?: boolean;
  /** Component and endpoint this replica serves (default router/route). */
  component?: string;
  endpoint?: string;
  service?: KvRouterHubOptions['service'];
}

export interface RunningRouter {
  hub: KvRouterHub;
  endpoint: ServedEndpoint;
  close(): Promise<void>;
}

export async function startRouterServer(runtime: DistributedRuntime, options: RouterServerOptions): Promise<RunningRouter> {
  const component = options.component ?? ROUTER_COMPONENT;
  const hub = await KvRouterHub.start(runtime, {
    namespace: options.namespace,
    syncComponent: component,
    ...(options.router ? { router: options.router } : {}),
    ...(options.replicaSync ? { replicaSync: true } : {}),
    ...(options.service ? { service: options.service } : {}),
  });
  // Each decision goes out on `{ns}/{component}/router_decisions` for frontends' dashboards
  // (proto/dashboard.ts); fire-and-forget, nothing waits on it.
  const decisions = runtime.namespace(options.namespace).component(component);
  hub.decisionListeners.add((target, d) => {
    const event: RouterDecisionEvent = {
      requestId: d.requestId,
      component: target,
      instanceId: d.instanceId,
      promptBlocks: d.requestBlocks,
      candidates: decisionCandidates(d.costs),
      timestampMs: Date.now(),
    };
    void decisions.publish(DASHBOARD_TOPICS.routerDecisions, event).catch(() => undefined);
  });

  async function* handle(raw: unknown, _ctx: RequestContext): AsyncGenerator<RouterAnswer> {
    const call = parseRouterCall(raw);
    if (call.type === 'first_token' || call.type === 'finished') {
      const service = hub.started(call.component);
      if (call.type === 'first_token') service?.firstToken(call.requestId);
      else service?.finished(call.requestId, call.outputTokens);
      yield { type: 'ok' };
      return;
    }
    const service = hub.started(call.component) ?? (await hub.service(call.component, call.blockSize));
    if (call.type === 'book') {
      service.bookOn({ requestId: call.requestId, tokens: call.tokens }, call.instanceId);
      yield { type: 'ok' };
      return;
    }
    const result = service.route({ requestId: call.requestId, tokens: call.tokens, ...(call.noOverlapCredit === true ? { noOverlapCredit: true } : {}), ...(typeof call.loraId === "number" && Number.isSafeInteger(call.loraId) ? { loraId: call.loraId } : {}), ...(Array.isArray(call.loraResident) ? { loraResident: call.loraResident.filter((x) => typeof x === 'string') } : {}) }, call.candidates);
    if (result.kind === 'routed') {
      const d = result.decision;
      hub.reportDecision(call.component, d);
      yield { type: 'routed', instanceId: d.instanceId, overlapBlocks: d.overlapBlocks, requestBlocks: d.requestBlocks, ...(d.loraPrefetch !== undefined ? { loraPrefetch: d.loraPrefetch } : {}) };
    } else if (result.kind === 'all_busy') {
      yield { type: 'all_busy', retryAfterMs: result.retryAfterMs };
    } else {
      yield { type: 'no_candidates' };
    }
  }

  const endpoint = await runtime.namespace(options.namespace).component(component).endpoint(options.endpoint ?? ROUTE_ENDPOINT).serve(handle);
  return {
    hub,
    endpoint,
    close: async () => {
      await endpoint.stop().catch(() => undefined);
      await hub.close();
    },
  };
}
