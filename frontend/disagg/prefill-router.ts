/**
 * PrefillRouter: decides per request whether the prompt runs on a prefill worker, and if so
 * picks the prefill worker (the prefill selector: KV-aware when one is given, else round-robin)
 * and the decode worker (the frontend's selector over decode-role workers, routed with no
 * prefix-overlap credit, because the decode worker receives the whole prompt's KV anyway).
 * Everything that can refuse the request (--enforce-disagg) happens here, before any byte.
 */
import { servesLora, type InstanceId, type PreprocessedRequest } from '../../proto/wire.js';
import { loraCapable } from '../lora/served-adapters.js';
import { NoInstancesError } from '../../runtime/errors.js';
import type { ServedModel } from '../model-watcher.js';
import { RoundRobinSelector, type RouteRequest, type WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';
import { DEFAULT_DISAGG_POLICY, decideDisagg, type DisaggDecision, type DisaggPolicyConfig } from './policy.js';
import type { PrefillWorkers } from './prefill-pool.js';

/**
 * Optional capability of a KV-aware selector: how many leading prompt tokens `instanceId`
 * already caches. Without it the whole prompt counts as uncached.
 */
export interface PrefixOverlapSource {
  overlapTokens(route: RouteRequest, instanceId: InstanceId): number | undefined;
}

export function hasOverlapSource(selector: WorkerSelector): selector is WorkerSelector & PrefixOverlapSource {
  return typeof (selector as Partial<PrefixOverlapSource>).overlapTokens === 'function';
}

/** A disaggregated route, fixed in prepare; the stream may still re-prefill elsewhere. */
export interface DisaggRoute {
  prefillInstance: InstanceId;
  decodeInstance: InstanceId;
  uncachedTokens: number;
}

export type RouteOutcome = { kind: 'disagg'; route: DisaggRoute } | { kind: 'agg'; decision: DisaggDecision };

export interface PrefillRouterOptions extends Partial<DisaggPolicyConfig> {
  pool: PrefillWorkers;
  /** Picks within the prefill pool; default round-robin. */
  prefillSelector?: WorkerSelector;
  /** Where the uncached part of the prompt comes from; default: the frontend selector if it can tell. */
  overlap?: PrefixOverlapSource;
  health?: WorkerHealth;
}

export class PrefillRouter {
  readonly policy: DisaggPolicyConfig;
  readonly pool: PrefillWorkers;
  readonly prefillSelector: WorkerSelector;
  readonly health: WorkerHealth | undefined;
  private readonly overlap: PrefixOverlapSource | undefined;

  constructor(options: PrefillRouterOptions) {
    this.policy = {
      minPrefillTokens: options.minPrefillTokens ?? DEFAULT_DISAGG_POLICY.minPrefillTokens,
      enforce: options.enforce ?? DEFAULT_DISAGG_POLICY.enforce,
    };
    this.pool = options.pool;
    this.prefillSelector = options.prefillSelector ?? new RoundRobinSelector();
    this.overlap = options.overlap;
    this.health = options.health;
  }

  /**
   * Live, healthy prefill instances for a model, minus `excluded`; for an adapter request
   * (`lora`), only workers whose engine runs adapters.
   */
  prefillCandidates(model: string, excluded?: ReadonlySet<InstanceId>, lora?: string): InstanceId[] {
    let ids = this.pool.candidates(model);
    if (excluded && excluded.size > 0) ids = ids.filter((id) => !excluded.has(id));
    if (lora !== undefined) ids = loraCapable((id) => this.pool.card(model, id), ids);
    // Unlike WorkerHealth.filter, a pool of only failed workers is empty: aggregated beats a dead prefill.
    const now = Date.now();
    return this.health ? ids.filter((id) => !this.health!.isDown(id, now)) : ids;
  }

  /** Pick a prefill worker; undefined when none is live (or the selector declines). */
  async pickPrefill(model: string, request: PreprocessedRequest, excluded?: ReadonlySet<InstanceId>): Promise<InstanceId | undefined> {
    const candidates = this.prefillCandidates(model, excluded, request.lora);
    if (candidates.length === 0) return undefined;
    return this.prefillSelector.select({ model, request }, candidates);
  }

  /**
   * Decide for one request. `chosen` is the instance the frontend selector picked among the
   * model's agg/decode workers; it runs the request when the answer is aggregated.
   */
  async route(model: ServedModel, request: PreprocessedRequest, chosen: InstanceId, selector: WorkerSelector, pinned: boolean): Promise<RouteOutcome> {
    const decodeIds = this.decodeCandidates(model, pinned ? [chosen] : model.candidates(), request.lora);
    const prefillIds = this.prefillCandidates(model.name, undefined, request.lora);
    const overlapSource = this.overlap ?? (hasOverlapSource(selector) ? selector : undefined);
    const cached = overlapSource?.overlapTokens({ model: model.name, request }, chosen) ?? 0;
    const decision = decideDisagg(
      { promptTokens: request.tokenIds.length, cachedTokens: cached, prefillWorkers: prefillIds.length, decodeWorkers: decodeIds.length },
      this.policy,
    );
    if (decision.kind === 'reject') {
      const what = decision.reason === 'no_prefill_workers' ? 'prefill' : 'decode';
      throw new NoInstancesError(`no ${what} workers for model '${model.name}' and --enforce-disagg is set`);
    }
    if (decision.kind === 'agg') return { kind: 'agg', decision };

    const prefillInstance = await this.prefillSelector.select({ model: model.name, request }, prefillIds);
    if (prefillInstance === undefined) {
      if (this.policy.enforce) throw new NoInstancesError(`no prefill worker can take a request for model '${model.name}' now`);
      return { kind: 'agg', decision: { kind: 'agg', reason: 'no_prefill_workers', uncachedTokens: decision.uncachedTokens } };
    }
    let decodeInstance = chosen;
    // Re-select only when the first pick may have leaned on cache credit (or was not a decode
    // worker): a cursor-based selector would otherwise skip a worker on every request.
    if (!decodeIds.includes(chosen) || overlapSource !== undefined) {
      const picked = await selector.select({ model: model.name, request, noOverlapCredit: true }, decodeIds);
      if (picked !== undefined) decodeInstance = picked;
      else if (!decodeIds.includes(chosen)) throw new NoInstancesError(`no decode worker can take a request for model '${model.name}' now`);
    }
    return { kind: 'disagg', route: { prefillInstance, decodeInstance, uncachedTokens: decision.uncachedTokens } };
  }

  /** Decode-role workers: only they accept a KV hand-off from a prefill worker (and for an adapter request, only those that run adapters). */
  private decodeCandidates(model: ServedModel, ids: readonly InstanceId[], lora: string | undefined): InstanceId[] {
    const out: InstanceId[] = [];
    const now = Date.now();
    for (const id of ids) {
      const card = model.card(id);
      if (card?.role !== 'decode') continue;
      if (lora !== undefined && !servesLora(card)) continue;
      if (this.health?.isDown(id, now)) continue;
      out.push(id);
    }
    return out;
  }
}
