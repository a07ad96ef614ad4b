/**
 * `KvRouter`'s configuration, defaults, inputs and outputs: what the adapters pass it and get
 * back. Re-exported by `kv-router.ts`.
 */
import type { InstanceId, LoadMetrics } from '../proto/wire.js';
import { DEFAULT_COST_WEIGHTS, type CostRow, type CostWeights } from './cost.js';
import { DEFAULT_LORA_LOAD_MS } from './lora-affinity.js';
import { type LatencyCostConfig, type RouterCostKind } from './latency-cost.js';
import { type EventSequencerOptions, type SequencerStats } from './event-sequencer.js';
import type { IndexStats } from './indexer.js';
import { DEFAULT_OVERLOAD_POLICY, type OverloadPolicy, type RefusalPolicy } from './overload.js';
import { DEFAULT_PREFIX_AFFINITY, type PrefixAffinityPolicy } from './prefix-affinity.js';

export interface KvRouterConfig {
  blockSize: number;
  /** `--kv-overlap-score-credit` and `--router-prefill-load-scale`. */
  weights: CostWeights;
  /** `--router-temperature`: 0 = argmin with random tie-break. */
  temperature: number;
  /** False (`--no-kv-events`): learn cache contents from our own decisions instead. */
  useKvEvents: boolean;
  /** Approximate mode: how long a routed prefix is assumed cached. */
  approxTtlMs: number;
  /** Active sequences with no update for this long are presumed lost. */
  activeSequenceTtlMs: number;
  /** Passed over while another candidate is not; when all are, the least-bad one still gets the request. */
  overload: OverloadPolicy;
  /** Opt-in refusal (`--router-busy-threshold`, `--router-max-waiting`): every candidate busy → `all_busy`. */
  refusal?: RefusalPolicy;
  /** Retry-After hint of an `all_busy` answer. */
  busyRetryAfterMs: number;
  seed: number;
  /** Identifies this replica in `router_sync` messages. */
  replicaId: string;
  sequencer: Partial<EventSequencerOptions>;
  /** `--router-cost`: `blocks` (cost.ts, the default) or `latency` (latency-cost.ts, in ms). */
  cost: RouterCostKind;
  /** The latency cost's model, weights and targets (used with `cost: 'latency'`). */
  latency: Partial<LatencyCostConfig>;
  /**
   * Multi-LoRA: ms a worker takes to load an adapter when it has not reported its own
   * (`--router-lora-load-ms`); a worker without the request's adapter pays its load time
   * (lora-affinity.ts).
   */
  loraLoadMs: number;
  /** Multi-LoRA: a fixed penalty in blocks instead (tests, and the old behaviour); absent = from the load time. */
  loraLoadPenaltyBlocks?: number;
  /**
   * Weigh each worker's tier hits by the tier costs it reports (its measured onboard time
   * against its recompute time, `LoadTierReport`), falling back to `weights` for a worker that
   * has not reported them. False (`--router-host-hit-weight` / `--router-disk-hit-weight`
   * given): `weights` for everyone.
   */
  measuredTierWeights: boolean;
  /** A prefix holder with room takes the request unless truly overloaded (prefix-affinity.ts); minHeldShare 0 = off. */
  prefixAffinity: PrefixAffinityPolicy;
}


export const DEFAULT_KV_ROUTER_CONFIG: KvRouterConfig = {
  blockSize: 16,
  weights: DEFAULT_COST_WEIGHTS,
  temperature: 0,
  useKvEvents: true,
  approxTtlMs: 120_000,
  activeSequenceTtlMs: 600_000,
  overload: DEFAULT_OVERLOAD_POLICY,
  busyRetryAfterMs: 1_000,
  seed: 0x5eed,
  replicaId: 'router-0',
  sequencer: {},
  cost: 'blocks',
  latency: {},
  measuredTierWeights: true,
  prefixAffinity: DEFAULT_PREFIX_AFFINITY,
  loraLoadMs: DEFAULT_LORA_LOAD_MS,
};

export interface RouteRequest {
  requestId: string;
  /** Prompt token ids. Or pass `localHashes` (and `promptTokens`) when already hashed. */
  tokens?: ArrayLike<number>;
  localHashes?: readonly bigint[];
  /** Sequence hashes matching `localHashes`; computed when absent. */
  seqHashes?: readonly bigint[];
  /** Defaults to tokens.length, else localHashes.length × blockSize. */
  promptTokens?: number;
  /** Decode leg after a remote prefill: routed with no overlap credit (docs/design.md step 3). */
  noOverlapCredit?: boolean;
  /** Multi-LoRA: the adapter's lora_id; tokens are hashed under it, so only its blocks match. */
  loraId?: number;
  /** Multi-LoRA: the candidates that hold the adapter; the others pay its load time (lora-affinity.ts). */
  loraResident?: readonly InstanceId[];
}

export interface WorkerCandidate {
  instanceId: InstanceId;
  /** From the model card; used to turn booked blocks into KV usage. */
  totalBlocks?: number;
  /** Latest `load_metrics` from this worker, when any. */
  load?: LoadMetrics;
}

export interface RouteDecision {
  requestId: string;
  instanceId: InstanceId;
  /** Leading prompt blocks the chosen worker already caches. */
  overlapBlocks: number;
  requestBlocks: number;
  promptTokens: number;
  /** Every candidate's cost line, chosen one included. */
  costs: CostRow[];
  localHashes: readonly bigint[];
  seqHashes: readonly bigint[];
  /** Every candidate was over its load threshold: the least-bad one got it, to wait in its queue. */
  saturated?: boolean;
  /** Chosen among the prefix holders by prefix affinity (the rows' `prefixHolder`, `kvRoomBlocks` say why). */
  affinity?: boolean;
  /** Multi-LoRA: a worker without the adapter that should load it ahead of need (lora-affinity.ts). */
  loraPrefetch?: InstanceId;
  /** Multi-LoRA: the request's adapter, booked with it (ActiveSequences counts adapters per worker). */
  loraId?: number;
}

export type RouteResult =
  | { kind: 'routed'; decision: RouteDecision }
  /** Refusal is on and every candidate is busy by it: the frontend answers 429/503 + Retry-After. */
  | { kind: 'all_busy'; retryAfterMs: number; costs: CostRow[] }
  | { kind: 'no_candidates' };

export interface KvRouterStats {
  decisions: number;
  overlapBlocksRouted: number;
  eventsApplied: number;
  allBusy: number;
  /** Routed while every candidate was over its load threshold (to the least-bad one). */
  saturated: number;
  index: IndexStats;
  sequencer: SequencerStats;
  activeSequences: number;
}
