/**
 * KV-aware choice within the prefill pool (`--router-mode kv`): the same KV router backend the
 * frontend's selector uses, aimed at the prefill component, so a prompt goes to the prefill
 * worker that already caches most of it. Bookings follow the prefill call: routed → first
 * token → finished. When every prefill worker is over its load threshold the request still
 * gets one (round-robin): a queued prefill beats recomputing the prompt on a decode worker.
 */
import type { InstanceId } from '../../proto/wire.js';
import type { KvRoutingBackend } from '../../router/adapters/index.js';
import type { RouteTarget } from '../../proto/wire.js';
import { RoundRobinSelector, type RouteRequest, type WorkerSelector } from '../routing.js';
import type { PrefillWorkers } from './prefill-pool.js';

export class KvPrefillSelector implements WorkerSelector {
  readonly mode = 'kv' as const;
  private readonly fallback = new RoundRobinSelector();
  private readonly bookings = new Map<string, RouteTarget>();

  constructor(
    private readonly backend: KvRoutingBackend,
    private readonly pool: PrefillWorkers,
  ) {}

  async select(route: RouteRequest, candidates: readonly InstanceId[]): Promise<InstanceId | undefined> {
    const card = this.pool.card(route.model, candidates[0]!);
    if (card === undefined) return this.fallback.select(route, candidates);
    const target: RouteTarget = { component: card.component, blockSize: card.kvBlockSize };
    const { requestId, tokenIds } = route.request;
    this.release(requestId);
    const outcome = await this.backend.route(target, requestId, tokenIds, candidates);
    if (outcome.kind !== 'routed') return this.fallback.select(route, candidates);
    this.bookings.set(requestId, target);
    return outcome.instanceId;
  }

  onFirstToken(route: RouteRequest): void {
    const target = this.bookings.get(route.request.requestId);
    if (target) this.backend.firstToken(target, route.request.requestId);
  }

  onFinished(route: RouteRequest): void {
    this.release(route.request.requestId);
  }

  private release(requestId: string): void {
    const target = this.bookings.get(requestId);
    if (target === undefined) return;
    this.bookings.delete(requestId);
    this.backend.finished(target, requestId);
  }
}
