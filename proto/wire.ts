/**
 * Wire types shared by every process: the one TypeScript mirror of what crosses a process
 * boundary (request-plane payloads, event-plane payloads, discovery records). Payloads are
 * msgpack (msgpackr) on the request and event planes and JSON in discovery. Each protocol
 * with its own endpoint has its own file here (model-card, kv-recovery, kv-release, router);
 * this module re-exports them all, so importers need only this one.
 *
 * Instance ids are u64 values written as 16-digit lowercase hex strings everywhere in
 * TypeScript and on the wire, so they survive JSON without precision loss.
 */

/** u64 as 16-digit lowercase hex. */
export type InstanceId = string;

export type WorkerRole = 'agg' | 'prefill' | 'decode';
export type EngineKind = 'mocker' | 'native';

/** Discovery value under `v1/instances/{ns}/{component}/{endpoint}/{instance_id_hex}`. */
export interface InstanceRecord {
  namespace: string;
  component: string;
  endpoint: string;
  instanceId: InstanceId;
  /** host:port of the process's gRPC server. */
  address: string;
  metadata: Record<string, unknown>;
}

export interface SamplingOptions {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  seed?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  repetitionPenalty?: number;
  /**
   * OpenAI `logit_bias`: [token id, bias in [-100, 100]] pairs, unique ids, added to the logits
   * before sampling (+100 all but forces a token, -100 bans it). Ids outside the engine's
   * vocabulary are ignored by engines; the frontend refuses them when it knows the vocabulary.
   */
  logitBias?: Array<[number, number]>;
}

export interface StopOptions {
  maxTokens: number;
  /** Token ids that end generation (EOS and stop token ids), unless ignoreEos. */
  stopTokenIds: number[];
  ignoreEos: boolean;
  /** Minimum tokens before EOS may end generation. */
  minTokens?: number;
}

/** Prefill → decode hand-off (docs/design.md "Disaggregation" step 2). */
export interface KvTransferParams {
  prefillInstanceId: InstanceId;
  /** Prefill-side block ids holding the prompt KV, in order. */
  blockIds: number[];
  numTokens: number;
  /** Remote-key and address material the decode side needs to read the pool. */
  ucxWorkerAddress: string;
  remoteKey: string;
  poolBaseAddress: string;
  /** Bytes per block in the pool, and the pool layout name. */
  blockBytes: number;
  layout: string;
  /** Opaque id the prefill side uses to release the pinned blocks. */
  transferId: string;
  /** The prefill pool's layout as data; absent from older workers (read `layout` then). */
  kvLayout?: KvLayoutDescriptor;
  /** Where the prefill pool lives; absent = a host pool (older workers). */
  kvPlacement?: KvPlacement;
  /**
   * A device pool's export handle (base64; CUDA IPC, or the SIMT device's shared memory): a
   * decode worker on the same node maps the pool once and copies blocks device to device.
   * The UCX fields above then describe a host copy of the blocks (the staged path).
   */
  kvDeviceHandle?: string;
  /**
   * Layer-wise streaming (docs/disaggregation.md): where the prefill worker publishes how many
   * layers of these blocks are written, an 8-byte slot a decode worker reads over UCX
   * (workers/disagg/layer-progress-region.ts). Absent: the blocks are whole when this arrives.
   */
  kvLayerProgress?: KvLayerProgressSlot;
}

/** One hand-off's progress slot: `u32 layersReady ‖ u32 generation` at the descriptor's block. */
export interface KvLayerProgressSlot {
  ucxWorkerAddress: string;
  remoteKey: string;
  poolBaseAddress: string;
  blockBytes: number;
  layout: string;
  blockIds: number[];
  generation: number;
  numLayers: number;
}

/** Endpoint name of a worker's generate call (the model card names its component and endpoint). */
export const GENERATE_ENDPOINT = 'generate';

/** One preprocessed request into a worker's generate endpoint. */
export interface PreprocessedRequest {
  requestId: string;
  model: string;
  tokenIds: number[];
  sampling: SamplingOptions;
  stop: StopOptions;
  /** undefined = no logprobs; 0 = the sampled token's logprob only; n = plus n top alternatives. */
  logprobs?: number;
  /** Present on a decode request that follows a remote prefill. */
  kvTransfer?: KvTransferParams;
  /** Set on a prefill request: run with max_tokens 1 and keep the blocks for transfer. */
  prefillOnly?: boolean;
  /**
   * With prefillOnly (frontend --kv-layer-streaming): the prefill worker may send an early
   * delta with no token and kvTransfer.kvLayerProgress once the hand-off's blocks are in the
   * step that writes them, so a decode worker can copy layers while the prefill computes.
   */
  kvLayerStreaming?: boolean;
  /** Tokens already generated before a migration: appended to the prompt by the caller. */
  numPriorOutputTokens?: number;
  /** Constrain the output (structured output, forced tool calls); validated by the frontend. */
  structured?: StructuredOutputSpec;
  /** Multi-LoRA: the adapter (by name) applied to this request; `model` stays the base model. */
  lora?: string;
  /** Its lora_id from the model cards, for the router's adapter-keyed hashes (the worker computes its own). */
  loraId?: number;
  /** Where the adapter's files are (from a card that lists it): a worker without it loads it first. */
  loraPath?: string;
}

export type FinishReason = 'stop' | 'length' | 'cancelled' | 'error';

export interface TokenLogprob {
  tokenId: number;
  logprob: number;
  top: Array<{ tokenId: number; logprob: number }>;
}

/** One streamed delta from a worker. Several tokens may be batched when the consumer lags. */
export interface TokenDelta {
  tokenIds: number[];
  logprobs?: TokenLogprob[];
  finishReason?: FinishReason;
  /** On the first delta (prompt and cached tokens so far) and on the final delta (totals). */
  usage?: { promptTokens: number; completionTokens: number; cachedTokens: number };
  /** Present on a prefill-only response. */
  kvTransfer?: KvTransferParams;
  /** Worker that produced this delta (for debugging headers). */
  instanceId?: InstanceId;
}

// ---- event plane payloads ----

export interface KvStoredBlock {
  /** Sequence (chained) hash as u64 decimal string. */
  blockHash: string;
  /** Local (tokens-only) hash as u64 decimal string. */
  tokensHash: string;
}

/**
 * Which tier an event is about (vLLM's `medium`): absent, 'gpu' or 'device' = the engine pool;
 * 'cpu' = the worker's host tier (G2); 'disk' = its disk tier (G3). Consumers that know only
 * the device tier skip the others.
 */
export type KvMedium = 'gpu' | 'device' | 'cpu' | 'disk';

export type KvEventData =
  | {
      type: 'stored';
      parentHash?: string;
      blocks: KvStoredBlock[];
      medium?: KvMedium;
      /** vLLM's lora_id: the blocks were computed under this adapter (router/hashing.ts loraIdOf); absent = base model. */
      loraId?: number;
    }
  | { type: 'removed'; blockHashes: string[]; medium?: KvMedium }
  | { type: 'cleared' };

/** True for an event about a tier below the engine pool (medium 'cpu' or 'disk'). */
export function isLowerTierEvent(data: KvEventData): boolean {
  return data.type !== 'cleared' && (data.medium === 'cpu' || data.medium === 'disk');
}

/** Published on topic `kv_events`; ids are gap-free per worker from 0. */
export interface KvEvent {
  workerId: InstanceId;
  eventId: number;
  data: KvEventData;
}

/**
 * Published on topic `load_metrics` after each scheduler step (at most every
 * `--load-metrics-interval`; the latest of a throttled burst is always sent, so a worker that
 * goes idle reports its zero), and at least every `LOAD_REPORT_HEARTBEAT_MS` while the worker
 * runs, busy or idle. A report older than `LOAD_REPORT_STALE_MS` (by receipt) is stale: readers
 * must not show or use it as current.
 */
export interface LoadMetrics {
  workerId: InstanceId;
  numRunning: number;
  numWaiting: number;
  kvUsage: number;
  activeBlocks: number;
  totalBlocks: number;
  queuedPrefillTokens: number;
  timestampMs: number;
  /** Only on workers with KV tiers below the engine pool (docs/kv-tiers.md); absent means none. */
  tiers?: LoadTierReport;
  /**
   * Multi-LoRA: what loading one adapter takes on this worker, its perf model's ms (the mocker
   * scales wall time by its speedup ratio); averaged over its loads, absent before the first.
   * The KV router charges it to this worker for a request whose adapter it lacks (docs/lora.md).
   */
  loraLoadMs?: number;
  /**
   * Multi-LoRA: this worker's `--max-loras`, the most distinct adapters it runs at once; absent
   * on workers without adapters (or older ones). The KV router charges a worker whose in-flight
   * adapters would exceed it (router/lora-affinity.ts `loraSlotWaits`).
   */
  maxLoras?: number;
  /** Only on workers that speculate (docs/speculative.md); absent means speculative decoding is off. */
  spec?: LoadSpecReport;
}

/**
 * A speculating worker's running totals since it started, as vLLM counts them: verify steps
 * of one sequence (drafts), draft tokens verified, draft tokens accepted. Acceptance rate =
 * acceptedTokens / draftTokens; mean tokens per verify = 1 + acceptedTokens / drafts.
 */
export interface LoadSpecReport {
  drafts: number;
  draftTokens: number;
  acceptedTokens: number;
}

/**
 * A worker's KV tiers in its load report: occupancy now (blocks) and, since the worker started,
 * the prompt tokens looked up in its prefix cache and those served per tier (device = the engine
 * pool; host and disk = onboarded from G2 / G3). Hit rate of a tier = its hit tokens / queryTokens.
 */
export interface LoadTierReport {
  hostBlocks: number;
  hostCapacity: number;
  diskBlocks: number;
  diskCapacity: number;
  queryTokens: number;
  hitTokens: { device: number; host: number; disk: number };
  /**
   * What a hit in each tier costs on this worker: ms to onboard one block (measured on its last
   * onboards, the bandwidth's figure before any) against ms to recompute it (its perf model).
   * The KV router weighs tier hits by 1 − onboard / recompute (router/cost.ts). Absent from
   * workers that predate it.
   */
  onboardMsPerBlock?: { host: number; disk: number };
  recomputeMsPerBlock?: number;
}

/** A worker re-publishes its load at least this often, with or without steps. */
export const LOAD_REPORT_HEARTBEAT_MS = 1000;
/** A load report older than this is stale: three heartbeats missed. */
export const LOAD_REPORT_STALE_MS = 3 * LOAD_REPORT_HEARTBEAT_MS;

export const TOPICS = {
  kvEvents: 'kv_events',
  loadMetrics: 'load_metrics',
  routerSync: 'router_sync',
} as const;
export type Topic = (typeof TOPICS)[keyof typeof TOPICS];

// ---- one module for every wire type: the per-protocol files, re-exported ----

export * from './model-card.js';
export * from './kv-recovery.js';
export * from './kv-release.js';
export * from './router.js';
export * from './structured-output.js';
export * from './dashboard.js';
export * from './json.js';
export * from './embedding.js';
import type { StructuredOutputSpec } from './structured-output.js';
import type { KvLayoutDescriptor, KvPlacement } from './model-card.js';
export * from './lora.js';
export * from './kv-stage.js';
export * from './kv-prefetch.js';
