/**
 * Wiring of the prefill router for `startFrontend`: the pool as a view over the process's card
 * feed and client cache, the prefill selector (KV-aware with `--router-mode kv`), the policy
 * flags, and the Disaggregator the generation pipeline calls.
 */
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

/** `startFrontend({ disagg })`: the prefill router's flags. */
export interface DisaggOptions extends Partial<DisaggPolicyConfig> {
  /** Picks within the prefill pool (a KV-aware selector over prefill workers); default round-robin. */
  prefillSelector?: WorkerSelector;
  /** Where "cached" comes from when the frontend selector cannot tell. */
  overlap?: PrefixOverlapSource;
  /** `--router-mode kv`: the KV router backend; prefill workers are then chosen KV-aware. */
  kvBackend?: KvRoutingBackend;
  /** `--kv-layer-streaming`: decode workers copy hand-offs layer by layer during the prefill. */
  layerStreaming?: boolean;
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
  const disaggregator = new Disaggregator(router, new DisaggMetrics(deps.registry), log, options.layerStreaming === true);
  return { disaggregator, pool, close: () => pool.close() };
}
