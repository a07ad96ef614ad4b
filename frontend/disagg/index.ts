/** Public surface of the frontend's prefill router (disaggregated prefill/decode). */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { KvRoutingBackend } from '../../router/adapters/index.js';
import type { ModelCardFeed } from '../../runtime/index.js';
import type { WorkerSelector } from '../routing.js';
import type { WorkerConnector } from '../worker-client.js';
import type { WorkerClients } from '../worker-clients.js';
import type { WorkerHealth } from '../worker-health.js';
import { Disaggregator } from './disaggregator.js';
import { KvPrefillSelector } from './kv-prefill-selector.js';
import { DisaggMetrics } from './metrics.js';
import type { DisaggPolicyConfig } from './policy.js';
import { PrefillPool } from './prefill-pool.js';
import { PrefillRouter, type PrefixOverlapSource } from './prefill-router.js';

export { decideDisagg, uncachedTokens, DEFAULT_DISAGG_POLICY, type DisaggDecision, type DisaggInputs, type DisaggPolicyConfig, type DisaggReason } from './policy.js';
export { PrefillPool, type PrefillWorkers } from './prefill-pool.js';
export { PrefillRouter, hasOverlapSource, type DisaggRoute, type PrefillRouterOptions, type PrefixOverlapSource, type RouteOutcome } from './prefill-router.js';
export { streamDisaggregated, type DisaggStreamPlan, type DisaggTrace } from './disagg-stream.js';
export { Disaggregator, type DisaggPrepared, type DisaggStreamArgs } from './disaggregator.js';
export { DisaggMetrics, DISAGG_PATHS, type DisaggPath } from './metrics.js';
export { KvPrefillSelector } from './kv-prefill-selector.js';
export { DECODE_WORKER_HEADER, PREFILL_WORKER_HEADER, disaggHeaders, disaggNvext, type DisaggNvext } from './response.js';

/** `startFrontend({ disagg })`: the prefill router's flags. */
export interface DisaggOptions extends Partial<DisaggPolicyConfig> {
  /** Picks within the prefill pool (a KV-aware selector over prefill workers); default round-robin. */
  prefillSelector?: WorkerSelector;
  /** Where "cached" comes from when the frontend selector cannot tell. */
  overlap?: PrefixOverlapSource;
  /** `--router-mode kv`: the KV router backend; prefill workers are then chosen KV-aware. */
  kvBackend?: KvRoutingBackend;
}

export interface DisaggDeps {
  /** The process's one card feed and client cache (the pool is a view over them). */
  cards: ModelCardFeed;
  clients: WorkerClients;
  connector: WorkerConnector;
  registry: Registry;
  log: Logger;
  health?: WorkerHealth;
}

export interface DisaggHandle {
  disaggregator: Disaggregator;
  pool: PrefillPool;
  close(): void;
}

/** Build the prefill pool view and the pipeline's Disaggregator. */
export async function startDisaggregation(deps: DisaggDeps, options: DisaggOptions = {}): Promise<DisaggHandle> {
  const log = deps.log.child({ part: 'prefill-router' });
  const pool = new PrefillPool(deps.cards, deps.clients, deps.connector, log);
  const router = new PrefillRouter({
    pool,
    ...(options.minPrefillTokens !== undefined ? { minPrefillTokens: options.minPrefillTokens } : {}),
    ...(options.enforce !== undefined ? { enforce: options.enforce } : {}),
    ...(options.prefillSelector
      ? { prefillSelector: options.prefillSelector }
      : options.kvBackend
        ? { prefillSelector: new KvPrefillSelector(options.kvBackend, pool) }
        : {}),
    ...(options.overlap ? { overlap: options.overlap } : {}),
    ...(deps.health ? { health: deps.health } : {}),
  });
  const disaggregator = new Disaggregator(router, new DisaggMetrics(deps.registry), log);
  return { disaggregator, pool, close: () => pool.close() };
}
