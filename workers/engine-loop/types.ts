/**
 * The engine loop's contracts with the worker around it: its configuration, where it reports
 * (sinks), the KV importer a decode worker gives it, per-request options, and the stats it
 * shows on `/metrics`.
 */
import type { Engine } from '../engines/engine.js';
import type { InstanceId, KvEvent, KvTransferParams, LoadMetrics } from '../../proto/wire.js';
import type { KvImportStart, SchedulerConfig, SchedulerLoad } from '../scheduler/types.js';
import type { GrammarProvider } from './structured-decoding.js';
import type { KvTierManager } from '../kv-tiers/kv-tier-manager.js';
import type { LoraRegistry } from '../lora/lora-registry.js';
import type { SpeculatorConfig } from '../speculative/speculator.js';
import type { SpecTotals } from '../speculative/spec-counters.js';

/** Where the loop reports; the worker process publishes these on the event plane. */
export interface EngineLoopSinks {
  onKvEvents?(events: KvEvent[]): void;
  onLoadMetrics?(metrics: LoadMetrics): void;
}

/** One KV import the loop asks for: pull `source`'s blocks into the sequence's local blocks. */
export interface KvImportJob extends KvImportStart {
  source: KvTransferParams;
  /** The sequence's tokens (a view; stable while the import runs), for checking pulled KV. */
  tokenIds: Int32Array;
}

/**
 * Pulls a remote prefill's KV (decode workers). Resolves true when the KV is in place, false
 * (or rejects) to make the sequence compute its prompt itself. It must not settle while it
 * may still write into the job's blocks.
 */
export interface KvImporter {
  importKv(job: KvImportJob): Promise<boolean>;
}

/** Per-request options of generate() beyond the wire request. */
export interface GenerateOptions {
  /** Keep the blocks when the sequence finishes (prefill hand-off); see releasePinned(). */
  pinOnFinish?: boolean;
  /** Called with the scheduler's sequence id once the request is accepted. */
  onAdded?(seqId: number): void;
}

export interface EngineLoopConfig {
  engine: Engine;
  /** Imports request.kvTransfer's KV; without one, such requests compute their prompt. */
  kvImporter?: KvImporter;
  /** Scheduler limits; numBlocks and blockSize default to the engine's. */
  scheduler?: Partial<SchedulerConfig>;
  workerId?: InstanceId;
  sinks?: EngineLoopSinks;
  /** Events kept for replay; default 1024. */
  kvEventCapacity?: number;
  /** Structured output: matchers over this worker's vocabulary; without it such requests are refused. */
  grammar?: GrammarProvider;
  /** KV tiers below the engine pool (G2 host, G3 disk): offload on eviction, onboard on a prefix hit. */
  kvTiers?: KvTierManager;
  /** Multi-LoRA: the adapters this worker serves; without it a request naming one is refused (not_found). */
  loras?: LoraRegistry;
  /**
   * Wall ms × this = the perf model's ms (the mocker: its speedup ratio): scales what the load
   * report says an adapter load takes, so the router compares it with its own step times.
   */
  modelTimeScale?: number;
  /**
   * Speculative decoding (docs/speculative.md): decoding sequences verify the engine's drafts
   * where the policy says it pays. `cost` prices steps: a MeasuredStepCost is fed this loop's
   * step times. Needs an engine with a drafter.
   */
  speculative?: SpeculatorConfig;
}

/** The scheduler's load snapshot plus the loop's running totals (what `/metrics` shows). */
export interface EngineLoopStats extends SchedulerLoad {
  /** Prefix-cache counters in tokens (vLLM's prefix_cache_queries / prefix_cache_hits). */
  prefixCacheQueries: number;
  prefixCacheHits: number;
  numPreemptions: number;
  numSteps: number;
  /** Requests accepted since start, and requests with an open stream now. */
  numRequestsTotal: number;
  numActiveRequests: number;
  /** Finished prefill-only sequences still holding their blocks for a hand-off. */
  numPinnedSequences: number;
  /** Sequences holding blocks while their KV import is in flight. */
  numTransferring: number;
  /** Speculative decoding's counters (vLLM's spec_decode_*); absent when it is off. */
  specTotals?: SpecTotals;
}
