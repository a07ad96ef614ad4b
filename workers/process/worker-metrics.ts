/**
 * Worker gauges on `/metrics`: `tandem_worker_*` plus the vLLM names that existing gateways
 * (llm-d's inference scheduler, the Gateway API inference extension) read to score workers.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { EngineLoopStats } from '../engine-loop/index.js';

export class WorkerMetrics {
  private readonly running: Gauge;
  private readonly waiting: Gauge;
  private readonly kvUsage: Gauge;
  private readonly vllmRunning: Gauge;
  private readonly vllmWaiting: Gauge;
  private readonly vllmKvUsage: Gauge;
  private readonly activeBlocks: Gauge;
  private readonly totalBlocks: Gauge;
  private readonly queuedPrefill: Gauge;
  private readonly vllmPrefixQueries: Counter;
  private readonly vllmPrefixHits: Counter;
  readonly requests: Counter;
  readonly generatedTokens: Counter;
  readonly steps: Counter;
  /** New grammars compiled off the event loop, by outcome (compiled, budget_exceeded, invalid, cancelled, failed). */
  readonly grammarCompiles: Counter;
  private readonly labels: { model_name: string };
  private lastQueries = 0;
  private lastHits = 0;

  constructor(registry: Registry, model: string) {
    const labels = { model_name: model };
    const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames: ['model_name'], registers: [registry] });
    const counter = (name: string, help: string) => new Counter({ name, help, labelNames: ['model_name'], registers: [registry] });
    this.running = gauge('tandem_worker_requests_running', 'Sequences in the running queue');
    this.waiting = gauge('tandem_worker_requests_waiting', 'Sequences in the waiting queue');
    this.kvUsage = gauge('tandem_worker_kv_usage_ratio', 'Fraction of KV blocks in use (0..1)');
    this.activeBlocks = gauge('tandem_worker_kv_active_blocks', 'KV blocks held by sequences');
    this.totalBlocks = gauge('tandem_worker_kv_total_blocks', 'KV blocks in the pool');
    this.queuedPrefill = gauge('tandem_worker_queued_prefill_tokens', 'Prompt tokens not yet computed');
    this.requests = counter('tandem_worker_requests_total', 'Requests accepted by this worker');
    this.generatedTokens = counter('tandem_worker_generated_tokens_total', 'Tokens sampled by this worker');
    this.steps = counter('tandem_worker_steps_total', 'Engine steps run');
    this.grammarCompiles = new Counter({ name: 'tandem_worker_grammar_compiles_total', help: 'New structured-output grammars compiled, by outcome', labelNames: ['model_name', 'outcome'], registers: [registry] });
    this.vllmRunning = gauge('vllm:num_requests_running', 'Number of requests in model execution batches');
    this.vllmWaiting = gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed');
    this.vllmKvUsage = gauge('vllm:kv_cache_usage_perc', 'KV-cache usage; 1 means 100 percent usage');
    this.vllmPrefixQueries = counter('vllm:prefix_cache_queries', 'Prefix cache queries, in terms of number of queried tokens');
    this.vllmPrefixHits = counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens');
    for (const m of [this.running, this.waiting, this.kvUsage, this.activeBlocks, this.totalBlocks, this.queuedPrefill, this.vllmRunning, this.vllmWaiting, this.vllmKvUsage]) {
      m.set(labels, 0);
    }
    for (const c of [this.requests, this.generatedTokens, this.steps, this.vllmPrefixQueries, this.vllmPrefixHits]) c.inc(labels, 0);
    this.labels = labels;
  }

  update(s: EngineLoopStats): void {
    const l = this.labels;
    this.running.set(l, s.numRunning);
    this.waiting.set(l, s.numWaiting);
    this.kvUsage.set(l, s.kvUsage);
    this.activeBlocks.set(l, s.activeBlocks);
    this.totalBlocks.set(l, s.totalBlocks);
    this.queuedPrefill.set(l, s.queuedPrefillTokens);
    this.vllmRunning.set(l, s.numRunning);
    this.vllmWaiting.set(l, s.numWaiting);
    this.vllmKvUsage.set(l, s.kvUsage);
    // the snapshot carries running totals; counters only move forward by the difference
    if (s.prefixCacheQueries > this.lastQueries) this.vllmPrefixQueries.inc(l, s.prefixCacheQueries - this.lastQueries);
    if (s.prefixCacheHits > this.lastHits) this.vllmPrefixHits.inc(l, s.prefixCacheHits - this.lastHits);
    this.lastQueries = s.prefixCacheQueries;
    this.lastHits = s.prefixCacheHits;
  }
}

/** Gauges read on scrape from their owners. */
export interface DisaggGaugeSources {
  inflight?(): number;
  pins?(): { transfers: number; blocks: number };
  /** Decode, device pool, --kv-layer-streaming: staging blocks held by layer-wise prefetches. */
  stagingBlocks?(): number;
}

/**
 * KV hand-off metrics of prefill and decode workers: transfers (decode side: bytes, time,
 * bandwidth, failures, recompute fallbacks, in flight) and pins (prefill side: blocks held for
 * a decode worker, timeouts).
 */
export class DisaggMetrics {
  private readonly transferBytes: Counter;
  private readonly transferSeconds: Histogram;
  private readonly transferGbps: Gauge;
  private readonly transferFailures: Counter;
  private readonly transfersInflight: Gauge;
  private readonly fallbacks: Counter;
  private readonly pinnedBlocks: Gauge;
  private readonly pinnedTransfers: Gauge;
  private readonly releaseTimeouts: Counter;
  private readonly byTransport: Counter;
  private readonly conversions: Counter;
  private readonly transportInfo: Gauge;
  private readonly streamHidden: Histogram;
  private readonly stagingBlocks: Gauge;
  private readonly labels: { model_name: string };

  constructor(registry: Registry, model: string, secondsBuckets: readonly number[], sources: DisaggGaugeSources = {}) {
    this.labels = { model_name: model };
    const names = ['model_name'];
    this.transferBytes = new Counter({ name: 'tandem_worker_kv_transfer_bytes_total', help: 'KV bytes pulled from prefill workers', labelNames: names, registers: [registry] });
    this.transferSeconds = new Histogram({ name: 'tandem_worker_kv_transfer_seconds', help: 'Time of one KV pull (submit to last completion)', labelNames: names, buckets: [...secondsBuckets], registers: [registry] });
    this.transferGbps = new Gauge({ name: 'tandem_worker_kv_transfer_gbps', help: 'Bandwidth of the last KV pull, GB/s (1e9 bytes)', labelNames: names, registers: [registry] });
    this.transferFailures = new Counter({ name: 'tandem_worker_kv_transfer_failures_total', help: 'KV pulls that failed, by error code', labelNames: ['model_name', 'code'], registers: [registry] });
    const labels = this.labels;
    this.transfersInflight = new Gauge({
      name: 'tandem_worker_kv_transfers_inflight',
      help: 'KV pulls in flight',
      labelNames: names,
      registers: [registry],
      collect() {
        if (sources.inflight) this.set(labels, sources.inflight());
      },
    });
    this.fallbacks = new Counter({ name: 'tandem_worker_kv_recompute_fallbacks_total', help: 'Remote prefills whose prompt was computed here because the KV could not be imported', labelNames: names, registers: [registry] });
    this.pinnedBlocks = new Gauge({
      name: 'tandem_worker_kv_pinned_blocks',
      help: 'KV blocks pinned for decode workers to pull',
      labelNames: names,
      registers: [registry],
      collect() {
        if (sources.pins) this.set(labels, sources.pins().blocks);
      },
    });
    this.pinnedTransfers = new Gauge({
      name: 'tandem_worker_kv_pinned_transfers',
      help: 'Prefill hand-offs waiting for kv_release',
      labelNames: names,
      registers: [registry],
      collect() {
        if (sources.pins) this.set(labels, sources.pins().transfers);
      },
    });
    this.releaseTimeouts = new Counter({ name: 'tandem_worker_kv_release_timeouts_total', help: 'Pinned hand-offs freed by the release timeout (unclaimed)', labelNames: names, registers: [registry] });
    this.byTransport = new Counter({
      name: 'tandem_worker_kv_transfer_by_transport_total',
      help: 'KV hand-offs imported, by transport (ucx-host, cuda-ipc, ucx-cuda, staged) and result',
      labelNames: ['model_name', 'transport', 'result'],
      registers: [registry],
    });
    this.conversions = new Counter({
      name: 'tandem_worker_kv_layout_conversions_total',
      help: 'KV hand-offs converted between layouts (block_size, dtype, block_size+dtype), by result',
      labelNames: ['model_name', 'conversion', 'result'],
      registers: [registry],
    });
    this.transportInfo = new Gauge({
      name: 'tandem_worker_kv_transport_info',
      help: "Always 1: this worker's KV pool placement, the transports it serves and its layout",
      labelNames: ['model_name', 'pool', 'transports', 'layout'],
      registers: [registry],
    });
    this.streamHidden = new Histogram({
      name: 'tandem_worker_kv_stream_hidden_ratio',
      help: "Layer-wise streamed hand-offs: share of the copy time spent while the prefill still computed (hidden behind it)",
      labelNames: names,
      buckets: [0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1],
      registers: [registry],
    });
    this.stagingBlocks = new Gauge({
      name: 'tandem_worker_kv_stream_staging_blocks',
      help: 'Decode worker, device pool, --kv-layer-streaming: staging blocks held by layer-wise prefetches (the reserved tail of the pool)',
      labelNames: names,
      registers: [registry],
      collect() {
        if (sources.stagingBlocks) this.set(labels, sources.stagingBlocks());
      },
    });
    for (const g of [this.transferGbps, this.transfersInflight, this.pinnedBlocks, this.pinnedTransfers, this.stagingBlocks]) g.set(this.labels, 0);
    for (const c of [this.transferBytes, this.fallbacks, this.releaseTimeouts]) c.inc(this.labels, 0);
  }

  /** A layer-wise prefetch landed every layer. */
  streamed(hiddenFraction: number): void {
    this.streamHidden.observe(this.labels, hiddenFraction);
  }

  transfer(event: { ok: boolean; bytes: number; seconds: number; code?: string }): void {
    const l = this.labels;
    if (event.ok) {
      this.transferBytes.inc(l, event.bytes);
      this.transferSeconds.observe(l, event.seconds);
      if (event.seconds > 0) this.transferGbps.set(l, event.bytes / event.seconds / 1e9);
    } else {
      this.transferFailures.inc({ ...l, code: event.code ?? 'internal' });
    }
  }

  /** One hand-off's import, however it ended. */
  imported(outcome: { ok: boolean; transport?: string; conversion?: string }): void {
    const result = outcome.ok ? 'ok' : 'failed';
    this.byTransport.inc({ ...this.labels, transport: outcome.transport ?? 'ucx-host', result });
    if (outcome.conversion !== undefined && outcome.conversion !== 'none') this.conversions.inc({ ...this.labels, conversion: outcome.conversion, result });
  }

  /** The info gauge: set once at start. `transports` comma-separated, as on the model card. */
  describeTransport(info: { pool: string; transports: readonly string[]; layout: string }): void {
    this.transportInfo.set({ ...this.labels, pool: info.pool, transports: info.transports.join(','), layout: info.layout }, 1);
  }

  fallback(): void {
    this.fallbacks.inc(this.labels);
  }

  releaseTimeout(): void {
    this.releaseTimeouts.inc(this.labels);
  }
}
