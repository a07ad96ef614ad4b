/**
 * EngineLoop: the thin adapter that drives a Scheduler and an Engine (timers and promises live
 * here, decisions do not).
 *
 *   generate(req) ─▶ scheduler.addSequence ─▶ kick()
 *   run():  while work: plan = schedule() → await engine.step(plan.batch) → applyStepResult
 *           → tokens into per-request OutputQueues → KV events into the log + sink
 *           → load metrics to the sink
 *
 * Exactly one step is in flight at a time. Aborting a request frees its blocks at once (the
 * step in flight, if any, skips it when its result comes back).
 */
import type { Engine } from '../engines/engine.js';
import type { KvTransferParams, LoadMetrics, LoadTierReport, PreprocessedRequest, TokenDelta, TokenLogprob } from '../../proto/wire.js';
import { TandemError, UnavailableError } from '../../runtime/errors.js';
import { KvEventLog } from '../block-manager/kv-event-log.js';
import { Scheduler } from '../scheduler/scheduler.js';
import type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats, GenerateOptions, KvImporter } from './types.js';
import type { KvImportStart, SchedulePlan, SchedulerLoad, StepOutcome } from '../scheduler/types.js';
import { OutputQueue } from './output-queue.js';
import type { AcquiredLora, LoraRegistry } from '../lora/lora-registry.js';
import { StructuredDecoding } from './structured-decoding.js';
import type { InlineOnboards, KvTierManager } from '../kv-tiers/kv-tier-manager.js';
import { Speculator } from '../speculative/speculator.js';

export type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats, GenerateOptions, KvImporter, KvImportJob } from './types.js';

export class EngineLoop {
  readonly engine: Engine;
  readonly scheduler: Scheduler;
  readonly kvEventLog: KvEventLog;
  /** Grammar state of constrained sequences; undefined without a GrammarProvider. */
  readonly structured: StructuredDecoding | undefined;
  private readonly sinks: EngineLoopSinks;
  private readonly queues = new Map<number, OutputQueue>();
  private readonly kvImporter: KvImporter | undefined;
  private readonly importSources = new Map<number, KvTransferParams>();
  private looping: Promise<void> | undefined;
  private closed = false;
  private kickAgain = false;
  private numRequestsTotal = 0;
  readonly kvTiers: KvTierManager | undefined;
  /** Multi-LoRA: the adapters this worker serves (workers/lora). */
  readonly loras: LoraRegistry | undefined;
  private readonly modelTimeScale: number;

  constructor(config: EngineLoopConfig) {
    this.engine = config.engine;
    this.loras = config.loras;
    this.modelTimeScale = config.modelTimeScale ?? 1;
    const info = config.engine.info;
    if (config.speculative !== undefined && config.engine.drafter === undefined) throw new Error('speculative decoding needs an engine with a drafter');
    this.scheduler = new Scheduler({
      ...config.scheduler,
      numBlocks: config.scheduler?.numBlocks ?? info.numBlocks,
      blockSize: config.scheduler?.blockSize ?? info.blockSize,
      ...(config.kvTiers !== undefined ? { kvTiers: { policy: config.kvTiers.policy, costs: config.kvTiers.costs } } : {}),
      ...(config.speculative !== undefined ? { speculative: new Speculator(config.speculative) } : {}),
    });
    this.kvTiers = config.kvTiers;
    this.kvEventLog = new KvEventLog({
      workerId: config.workerId ?? '0000000000000000',
      capacity: config.kvEventCapacity ?? 1024,
    });
    this.sinks = config.sinks ?? {};
    this.kvImporter = config.kvImporter;
    this.structured = config.grammar !== undefined ? new StructuredDecoding(config.grammar) : undefined;
  }

  /**
   * Streams one request's tokens. The last delta carries finishReason and usage. Throws a
   * TandemError when the request is rejected (too long for this worker) or the engine fails.
   */
  async *generate(request: PreprocessedRequest, signal: AbortSignal, options: GenerateOptions = {}): AsyncGenerator<TokenDelta, void, undefined> {
    const numPrompt = request.tokenIds.length;
    if (this.closed) throw new UnavailableError('engine loop is shut down');
    if (signal.aborted) {
      yield { tokenIds: [], finishReason: 'cancelled', usage: { promptTokens: numPrompt, completionTokens: 0, cachedTokens: 0 } };
      return;
    }
    const stop = request.prefillOnly ? { ...request.stop, maxTokens: 1 } : request.stop;
    // A grammar new to this worker is compiled off the event loop first; the batch runs on.
    const ready = request.structured !== undefined ? this.structured?.ready(request.structured, signal) : undefined;
    if (ready !== undefined) {
      await ready;
      if (this.closed) throw new UnavailableError('engine loop is shut down');
      if (signal.aborted) {
        yield { tokenIds: [], finishReason: 'cancelled', usage: { promptTokens: numPrompt, completionTokens: 0, cachedTokens: 0 } };
        return;
      }
    }
    const matcher = request.structured !== undefined ? this.createMatcher(request) : undefined;
    const remote = this.kvImporter !== undefined ? usableKvTransfer(request) : undefined;
    // An adapter this worker lacks but the request says where to find: loaded before admission,
    // and acquired in the same step as the check that it is resident (no eviction in between).
    const lora = request.lora !== undefined ? await this.acquireLora(request.lora, request.loraPath) : undefined;
    let added: ReturnType<Scheduler['addSequence']>;
    try {
      added = this.scheduler.addSequence({
        ...(lora !== undefined ? { loraId: lora.loraId, ...(lora.slot !== undefined ? { loraSlot: lora.slot } : {}) } : {}),
      requestId: request.requestId,
      promptTokenIds: request.tokenIds,
      sampling: request.sampling,
      stop,
      requestSeed: request.sampling.seed ?? seedFromRequestId(request.requestId),
      ...(request.logprobs !== undefined && request.logprobs >= 0 ? { logprobs: request.logprobs } : {}),
      ...(options.pinOnFinish ? { pinOnFinish: true } : {}),
      ...(request.numPriorOutputTokens ? { numPriorOutputTokens: request.numPriorOutputTokens } : {}),
      ...(remote !== undefined ? { numRemoteTokens: remote.numTokens } : {}),
      });
    } catch (err) {
      if (lora !== undefined) this.loras!.release(lora.name, lora.loraId);
      throw err;
    }
    if (added.type === 'rejected') {
      if (lora !== undefined) this.loras!.release(lora.name, lora.loraId);
      throw new TandemError(added.code, added.message);
    }
    const seqId = added.seqId;
    // Speculative decoding: the drafter learns the prompt now and follows the sequence's steps.
    const drafter = this.scheduler.speculator !== undefined && !request.prefillOnly ? this.engine.drafter : undefined;
    drafter?.begin(seqId, Int32Array.from(request.tokenIds));
    // The request's own budget, also on a prefill-only run: closing mode looks at the whole output.
    if (matcher !== undefined) this.structured!.register(seqId, matcher, request.stop.maxTokens);
    if (remote !== undefined) this.importSources.set(seqId, remote);
    options.onAdded?.(seqId);
    const queue = new OutputQueue();
    this.queues.set(seqId, queue);
    this.numRequestsTotal++;
    const onAbort = (): void => this.cancel(seqId, queue);
    signal.addEventListener('abort', onAbort, { once: true });
    this.kick();
    let finishReason: string | undefined;
    try {
      for (;;) {
        const delta = await queue.next();
        yield delta;
        finishReason = delta.finishReason;
        if (delta.finishReason !== undefined) return;
      }
    } finally {
      // A completed output may teach the drafter (the suffix drafter's global tree); a cancelled one does not.
      drafter?.end(seqId, finishReason === 'stop' || finishReason === 'length');
      signal.removeEventListener('abort', onAbort);
      // The consumer stopped early (returned or threw): free the sequence now.
      if (!queue.isClosed) this.cancel(seqId, queue);
      this.queues.delete(seqId);
      this.importSources.delete(seqId);
      this.structured?.remove(seqId);
      if (lora !== undefined) this.loras!.release(lora.name, lora.loraId);
    }
  }

  private acquireLora(name: string, path: string | undefined): Promise<AcquiredLora> {
    if (this.loras === undefined) throw new TandemError('not_found', `adapter '${name}' is not served by this worker`);
    return this.loras.acquireWhenReady(name, path);
  }

  /**
   * `load`: a snapshot this step already took (the LoadMetrics a sink just got), so a step
   * walks the queues once; extra fields in it are carried along.
   */
  stats(load: SchedulerLoad = this.scheduler.load()): EngineLoopStats {
    const bm = this.scheduler.blockManager;
    return {
      ...load,
      prefixCacheQueries: bm.prefixCacheQueries,
      prefixCacheHits: bm.prefixCacheHits,
      numPreemptions: this.scheduler.numPreemptions,
      numSteps: this.scheduler.numSteps,
      numRequestsTotal: this.numRequestsTotal,
      numActiveRequests: this.queues.size,
      numPinnedSequences: this.scheduler.numPinned,
      numTransferring: this.scheduler.numTransferring,
      ...(this.scheduler.speculator !== undefined ? { specTotals: this.scheduler.speculator.counters.snapshot() } : {}),
    };
  }

  /** The load report of this moment (what the sink gets after a step). */
  loadMetrics(): LoadMetrics {
    const m: LoadMetrics = { workerId: this.kvEventLog.workerId, ...this.scheduler.load(), timestampMs: Date.now() };
    if (this.kvTiers !== undefined) m.tiers = this.tierReport(this.kvTiers);
    const loraMs = this.loras?.meanLoadMs;
    if (loraMs !== undefined) m.loraLoadMs = loraMs * this.modelTimeScale;
    if (this.loras !== undefined && this.scheduler.maxLoras !== undefined) m.maxLoras = this.scheduler.maxLoras;
    const spec = this.scheduler.speculator?.counters;
    if (spec !== undefined) m.spec = { drafts: spec.drafts, draftTokens: spec.draftTokens, acceptedTokens: spec.acceptedTokens };
    return m;
  }

  /** The tiers' part of the load report (the dashboard's per-tier occupancy and hit rates). */
  private tierReport(tiers: KvTierManager): LoadTierReport {
    const s = tiers.stats();
    const bm = this.scheduler.blockManager;
    const bs = this.scheduler.blockSize;
    return {
      hostBlocks: s.hostBlocks,
      hostCapacity: s.hostCapacityBlocks,
      diskBlocks: s.diskBlocks,
      diskCapacity: s.diskCapacityBlocks,
      queryTokens: bm.prefixCacheQueries,
      hitTokens: { device: bm.prefixCacheHits, host: s.onboardHostBlocks * bs, disk: s.onboardDiskBlocks * bs },
      onboardMsPerBlock: tiers.onboardMsPerBlock,
      recomputeMsPerBlock: tiers.recomputeMsPerBlock(bs),
    };
  }

  /**
   * Frees the blocks a pinOnFinish sequence kept (the prefill hand-off is over or timed out),
   * and lets waiting sequences use them. False if the sequence holds no pinned blocks.
   */
  releasePinned(seqId: number): boolean {
    if (!this.scheduler.releasePinned(seqId)) return false;
    this.kick();
    this.publish();
    return true;
  }

  /** Resolves when no step is in flight and nothing is left to run. */
  async idle(): Promise<void> {
    while (this.looping !== undefined) await this.looping;
  }

  /** Stops taking work, fails open streams with `unavailable`, waits for the step in flight. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [seqId, queue] of this.queues) {
      this.scheduler.abort(seqId);
      queue.fail(new UnavailableError('worker shutting down'));
    }
    await this.idle();
    await this.kvTiers?.idle();
    await this.engine.close();
  }

  // ---- internals ----

  private kick(): void {
    if (this.closed) return;
    if (this.looping !== undefined) {
      // The run may be past its last look at the queues (an onboard settling while the run
      // winds down): look again once it ends.
      this.kickAgain = true;
      return;
    }
    this.kickAgain = false;
    this.looping = this.run().finally(() => {
      this.looping = undefined;
      if (this.kickAgain) this.kick();
    });
  }

  private async run(): Promise<void> {
    // Let requests that arrive in the same tick join the first step.
    await Promise.resolve();
    while (this.scheduler.hasWork && !this.closed) {
      const plan = this.scheduler.schedule();
      // Evicted blocks are read out before anything (an import, the step) writes into them;
      // inline onboards land before the step reads them (or beside it: overlapsStep).
      const inline = this.kvTiers !== undefined ? await this.moveTiers(plan) : undefined;
      if (inline !== undefined) await inline.ready;
      for (const t of plan.transfers) this.startImport(t);
      if (plan.batch.sequences.length === 0) {
        // Nothing fits now (blocks held by pinned sequences): wait for an add, abort or release.
        this.scheduler.applyStepResult({ sampled: [] });
        this.publish();
        return;
      }
      const structured = this.structured;
      let outcome: StepOutcome;
      let rejected: number[] | undefined;
      try {
        if (structured !== undefined && structured.size > 0) plan.batch.prepareSampling = () => structured.prepare(plan.batch);
        const started = performance.now();
        const result = await this.engine.step(plan.batch);
        if (inline !== undefined) this.scheduler.failInlineOnboards(await inline.failed);
        // Speculative decoding prices steps by what decode (and verify) steps took here.
        if (plan.numPrefillTokens === 0) this.scheduler.speculator?.observeStep(plan.numScheduledTokens, performance.now() - started);
        const grammar = structured?.advance(result);
        if (grammar !== undefined && grammar.rejected.length > 0) rejected = grammar.rejected;
        outcome = this.scheduler.applyStepResult(result, grammar?.stops);
      } catch (err) {
        this.failBatch(plan, err);
        continue;
      }
      if (rejected !== undefined) outcome = this.failRejected(outcome, rejected);
      this.deliver(outcome);
      this.publish();
    }
  }

  private async moveTiers(plan: SchedulePlan): Promise<InlineOnboards | undefined> {
    const evicted = this.scheduler.blockManager.drainEvicted();
    const settle = (seqId: number, ok: boolean): void => {
      this.scheduler.completeTransfer(seqId, ok);
      this.kick();
      this.publish();
    };
    try {
      return await this.kvTiers!.afterSchedule(evicted, plan.onboards, settle);
    } catch {
      // A failed G1 read loses only the offload of those blocks; the step runs on. Inline
      // onboards whose copy may not have landed recompute (their output of this step is dropped).
      const failed = plan.onboards.flatMap((o) => (o.inline ? [o.seqId] : []));
      return { ready: Promise.resolve(), failed: Promise.resolve(failed) };
    }
  }

  private startImport(start: KvImportStart): void {
    const source = this.importSources.get(start.seqId);
    const seq = this.scheduler.getSequence(start.seqId);
    const importer = this.kvImporter;
    const settle = (ok: boolean): void => {
      this.scheduler.completeTransfer(start.seqId, ok);
      this.kick();
      this.publish();
    };
    // A sequence aborted before admission has no source left: nothing was pulled.
    if (source === undefined || importer === undefined || seq === undefined) {
      settle(false);
      return;
    }
    importer.importKv({ ...start, source, tokenIds: seq.tokenView() }).then(settle, () => settle(false));
  }

  private deliver(outcome: StepOutcome): void {
    for (const out of outcome.outputs) {
      const queue = this.queues.get(out.seqId);
      if (queue === undefined) continue;
      // The first delta already says how much of the prompt was cached, so a stream the
      // frontend ends early (a stop string) still reports cached tokens.
      if (!queue.hasPromptUsage) {
        const seq = this.scheduler.getSequence(out.seqId);
        if (seq) queue.setPromptUsage({ promptTokens: seq.numPromptTokens, completionTokens: 0, cachedTokens: seq.numCachedTokens });
      }
      let lp: TokenLogprob | undefined;
      if (out.logprob !== undefined) lp = { tokenId: out.tokenId, logprob: out.logprob, top: out.topLogprobs ?? [] };
      queue.push(out.tokenId, lp);
      // A verify step returns the accepted drafts and the token after them.
      for (const f of out.following ?? []) {
        queue.push(f.tokenId, f.logprob !== undefined ? { tokenId: f.tokenId, logprob: f.logprob, top: f.topLogprobs ?? [] } : undefined);
      }
    }
    for (const f of outcome.finished) this.queues.get(f.seqId)?.finish(f.reason, f.usage);
  }

  private publish(): void {
    // Tier moves first: a block offloaded this step is announced in its new tier before its
    // device Removed, so a router never sees it vanish from the worker in between.
    const tierData = this.kvTiers?.policy.drainEvents();
    const deviceData = this.scheduler.blockManager.drainEvents();
    const data = tierData !== undefined && tierData.length > 0 ? [...tierData, ...deviceData] : deviceData;
    if (data.length > 0) {
      const events = this.kvEventLog.append(data);
      safeCall(() => this.sinks.onKvEvents?.(events));
    }
    if (this.sinks.onLoadMetrics !== undefined) {
      const metrics = this.loadMetrics();
      safeCall(() => this.sinks.onLoadMetrics?.(metrics));
    }
  }

  private cancel(seqId: number, queue: OutputQueue): void {
    const seq = this.scheduler.getSequence(seqId);
    const usage = {
      promptTokens: seq?.numPromptTokens ?? 0,
      completionTokens: seq?.numNewOutputTokens ?? 0,
      cachedTokens: seq?.numCachedTokens ?? 0,
    };
    if (this.scheduler.abort(seqId)) {
      queue.finish('cancelled', usage);
      // Freed blocks may let a blocked waiting sequence in.
      this.kick();
      // With nothing left to run no step follows: report the freed blocks and the lower load now.
      if (!this.scheduler.hasWork) this.publish();
    }
  }

  /** Parses request.structured into a matcher (prior outputs replayed); throws invalid_argument. */
  private createMatcher(request: PreprocessedRequest) {
    const structured = this.structured;
    if (structured === undefined) {
      throw new TandemError('invalid_argument', 'structured output is not available on this worker (no tokenizer.json in its model directory)');
    }
    const n = request.tokenIds.length;
    const prior = Math.max(0, Math.min(request.numPriorOutputTokens ?? 0, n - 1));
    return structured.create(request.structured!, request.tokenIds.slice(n - prior));
  }

  /**
   * Sequences whose sampled token their grammar rejected (the engine ignored the mask) or whose
   * matcher threw: the token is not delivered and the request fails, so no invalid output
   * reaches a client; the rest of the batch goes on.
   */
  private failRejected(outcome: StepOutcome, rejected: number[]): StepOutcome {
    const bad = new Set(rejected);
    for (const seqId of rejected) {
      const queue = this.queues.get(seqId);
      this.scheduler.abort(seqId);
      queue?.fail(new TandemError('internal', 'structured output: the sampled token does not fit the grammar (engine or grammar bug)'));
    }
    return { outputs: outcome.outputs.filter((o) => !bad.has(o.seqId)), finished: outcome.finished.filter((f) => !bad.has(f.seqId)) };
  }

  private failBatch(plan: SchedulePlan, err: unknown): void {
    // A failed step leaves the in-flight plan unapplied; clear it, then fail its sequences.
    this.scheduler.discardStep();
    for (const s of plan.batch.sequences) {
      const queue = this.queues.get(s.seqId);
      this.scheduler.abort(s.seqId);
      queue?.fail(new TandemError('internal', `engine step failed: ${(err as Error)?.message ?? String(err)}`, { cause: err }));
    }
  }
}

function safeCall(fn: () => void): void {
  try {
    fn();
  } catch {
    // A sink's failure must not stop token generation; the sink reports its own errors.
  }
}

/**
 * The request's KV transfer when it can be imported as sent: its tokens are a prefix of the
 * request that leaves at least one token to compute here. Otherwise the prompt is computed.
 */
function usableKvTransfer(request: PreprocessedRequest): KvTransferParams | undefined {
  const t = request.kvTransfer;
  if (t === undefined || request.prefillOnly) return undefined;
  if (!Number.isInteger(t.numTokens) || t.numTokens <= 0 || t.numTokens >= request.tokenIds.length) return undefined;
  return t;
}

/** Stable 32-bit FNV-1a of the request id: the sampling seed when the request sets none. */
export function seedFromRequestId(requestId: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < requestId.length; i++) {
    h ^= requestId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
