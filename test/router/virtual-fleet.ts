/**
 * A fleet of mocker workers in virtual time, behind a real `KvRouter`: each worker is the real
 * `Scheduler` (continuous batching, chunked prefill, prefix cache) stepping for exactly the time
 * the mocker would sleep (`stepTimeMs` of `MockerEngine.shapeOf`, divided by its speed), and the
 * router sees only what it sees in production: its own bookings, first tokens and stream ends.
 * Measurements are exact (no timers, no machine load), so "within 15%" tests the model, not
 * the box. Events are processed in time order: arrivals, then step ends.
 *
 * Options bring the rest of a worker and a frontend in: a host KV tier (the real `KvTierPolicy`
 * under the scheduler, evicted blocks offered to it, host onboards inline as the engine loop
 * runs them, tier events to the router before the device ones), load reports (published after
 * each step, a candidate carries the last one younger than 1 s, as `LoadFeed` does), the
 * frontend's busy queue (an `all_busy` request retries every 50 ms up to `busyWaitMs`, then is
 * refused: `KvSelector`), and round-robin through the same booking path.
 */
import { KvRouter } from '../../router/kv-router.js';
import { SeededRandom } from '../../runtime/random.js';
import type { CostRow } from '../../router/cost.js';
import { PolynomialPerfModel, stepTimeMs, type PerfModel } from '../../perf-model/index.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import type { SchedulePlan } from '../../workers/scheduler/types.js';
import { KvTierPolicy } from '../../workers/block-manager/kv-tier-policy.js';
import type { KvEventData, LoadMetrics, LoadTierReport } from '../../proto/wire.js';
import { mockResult, stopOpts } from '../workers/builders.js';

export interface VirtualWorkerSpec {
  id: string;
  /** 1 = the perf model's speed; 0.5 = every step takes twice as long (a half-speed worker). */
  speed: number;
  numBlocks?: number;
}

export interface VirtualRequest {
  requestId: string;
  atMs: number;
  tokens: number[];
  osl: number;
}

export interface VirtualFleetOptions {
  /** G2 blocks per worker (0 or absent: no host tier). */
  hostBlocks?: number;
  /** Simulated ms to copy one block host → pool; an inline onboard's step takes max(step, copy). Default 0. */
  hostCopyMsPerBlock?: number;
  /** Workers report load after every step; the router sees the last report younger than 1 s. */
  loadReports?: boolean;
  /** `all_busy` → retry every 50 ms for this long, then refused (the frontend's 429). Absent: throw. */
  busyWaitMs?: number;
  /** Round-robin through the router's booking path (each request is offered one worker in turn). */
  roundRobin?: boolean;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
}

export interface VirtualOutcome {
  requestId: string;
  workerId: string;
  arrivalMs: number;
  promptTokens: number;
  /** The chosen worker's cost row at routing time (with `latency` under the latency cost). */
  row: CostRow;
  /** Every candidate's row at routing time. */
  costs?: CostRow[];
  firstTokenMs?: number;
  endMs?: number;
  /** Prompt tokens the worker found cached (pool hit + tier onboards). */
  cachedTokens?: number;
  /** The frontend gave up on it (`busyWaitMs` passed with every worker over threshold). */
  refused?: boolean;
  /** all_busy answers before it was routed or refused. */
  busyRetries?: number;
}

interface WorkerState {
  spec: VirtualWorkerSpec;
  scheduler: Scheduler;
  engine: MockerEngine;
  plan: SchedulePlan | undefined;
  stepEndMs: number;
  seqToRequest: Map<number, string>;
  nextEventId: number;
  tiers: KvTierPolicy | undefined;
  /** The last load report and when it was published. */
  report: LoadMetrics | undefined;
}

export class VirtualFleet {
  private readonly workers: WorkerState[];
  readonly outcomes = new Map<string, VirtualOutcome>();
  nowMs = 0;

  private rrNext = 0;
  /** Requests answered all_busy, to try again at `atMs`. */
  private readonly retries: Array<{ atMs: number; request: VirtualRequest; firstMs: number; tries: number }> = [];

  constructor(
    specs: readonly VirtualWorkerSpec[],
    readonly router: KvRouter,
    private readonly model: PerfModel = new PolynomialPerfModel(),
    private readonly options: VirtualFleetOptions = {},
  ) {
    const bs = router.config.blockSize;
    this.workers = specs.map((spec) => {
      const numBlocks = spec.numBlocks ?? 4096;
      const tiers = (options.hostBlocks ?? 0) > 0 ? new KvTierPolicy({ hostBlocks: options.hostBlocks!, diskBlocks: 0 }) : undefined;
      const costs = { hostMsPerBlock: options.hostCopyMsPerBlock ?? 0, diskMsPerBlock: Infinity, prefillMs: (t: number) => model.prefillMs(t) / spec.speed };
      return {
        spec,
        scheduler: new Scheduler({
          numBlocks,
          blockSize: bs,
          ...(options.maxNumSeqs !== undefined ? { maxNumSeqs: options.maxNumSeqs } : {}),
          ...(options.maxNumBatchedTokens !== undefined ? { maxNumBatchedTokens: options.maxNumBatchedTokens } : {}),
          ...(tiers !== undefined ? { kvTiers: { policy: tiers, costs } } : {}),
        }),
        engine: new MockerEngine({ numBlocks, blockSize: bs, perfModel: model }),
        plan: undefined,
        stepEndMs: Infinity,
        seqToRequest: new Map(),
        nextEventId: 0,
        tiers,
        report: undefined,
      };
    });
    // Event mode: the router meets each worker empty (its dump), then hears every KV event the
    // worker's block manager queues, after each step, as the worker process would publish them.
    if (router.config.useKvEvents) {
      for (const w of this.workers) {
        router.addWorker(w.spec.id, 0);
        router.applyDump({ workerId: w.spec.id, nextEventId: 0, events: [] }, 0);
      }
    }
  }

  /** Slow a worker down (or speed it up) from now on. */
  setSpeed(workerId: string, speed: number): void {
    this.worker(workerId).spec.speed = speed;
  }

  /**
   * Route and serve `requests` (sorted by `atMs`), then run until every stream has ended.
   * `onRouted` sees each request right after it was routed (the router's state mid-run).
   */
  run(requests: readonly VirtualRequest[], onRouted?: (o: VirtualOutcome) => void): VirtualOutcome[] {
    const done: VirtualOutcome[] = [];
    let next = 0;
    for (;;) {
      const busy = this.workers.filter((w) => w.plan !== undefined);
      const stepEnd = busy.length > 0 ? Math.min(...busy.map((w) => w.stepEndMs)) : Infinity;
      const arrival = next < requests.length ? requests[next]!.atMs : Infinity;
      const retry = this.retries.length > 0 ? this.retries[0]!.atMs : Infinity;
      if (arrival === Infinity && stepEnd === Infinity && retry === Infinity) break;
      if (retry <= arrival && retry <= stepEnd) {
        this.nowMs = retry;
        const r = this.retries.shift()!;
        const o = this.arrive(r.request, r.firstMs, r.tries);
        if (o !== undefined) {
          done.push(o);
          onRouted?.(o);
        }
      } else if (arrival <= stepEnd) {
        this.nowMs = arrival;
        const o = this.arrive(requests[next++]!, this.nowMs, 0);
        if (o !== undefined) {
          done.push(o);
          onRouted?.(o);
        }
      } else {
        this.nowMs = stepEnd;
        for (const w of busy) if (w.stepEndMs === stepEnd) this.finishStep(w);
      }
    }
    return done;
  }

  /** Routes one request; undefined while it waits in the frontend's busy queue. */
  private arrive(r: VirtualRequest, firstMs: number, tries: number): VirtualOutcome | undefined {
    let candidates = this.workers.map((w) => ({
      instanceId: w.spec.id,
      totalBlocks: w.scheduler.blockManager.numBlocks,
      ...(w.report !== undefined && this.nowMs - w.report.timestampMs <= 1000 ? { load: w.report } : {}),
    }));
    if (this.options.roundRobin) candidates = [candidates[this.rrNext++ % candidates.length]!];
    const result = this.router.route({ requestId: r.requestId, tokens: r.tokens }, candidates, this.nowMs);
    if (result.kind === 'all_busy' && this.options.busyWaitMs !== undefined) {
      if (this.nowMs - firstMs < this.options.busyWaitMs) {
        this.retries.push({ atMs: this.nowMs + 50, request: r, firstMs, tries: tries + 1 });
        this.retries.sort((a, b) => a.atMs - b.atMs);
        return undefined;
      }
      const refused: VirtualOutcome = { requestId: r.requestId, workerId: '', arrivalMs: firstMs, promptTokens: r.tokens.length, row: result.costs[0]!, refused: true, busyRetries: tries };
      this.outcomes.set(r.requestId, refused);
      return refused;
    }
    if (result.kind !== 'routed') throw new Error(`virtual fleet: ${result.kind}`);
    const d = result.decision;
    const w = this.worker(d.instanceId);
    const added = w.scheduler.addSequence({ requestId: r.requestId, promptTokenIds: r.tokens, sampling: {}, stop: stopOpts(r.osl), requestSeed: 1 });
    if (added.type !== 'added') throw new Error(`virtual fleet: ${added.message}`);
    w.seqToRequest.set(added.seqId, r.requestId);
    const outcome: VirtualOutcome = { requestId: r.requestId, workerId: d.instanceId, arrivalMs: firstMs, promptTokens: r.tokens.length, row: d.costs.find((c) => c.instanceId === d.instanceId)!, costs: d.costs, ...(tries > 0 ? { busyRetries: tries } : {}) };
    this.outcomes.set(r.requestId, outcome);
    if (w.plan === undefined) this.startStep(w);
    return outcome;
  }

  private startStep(w: WorkerState): void {
    if (!w.scheduler.hasWork) return;
    w.plan = w.scheduler.schedule();
    let copyMs = 0;
    if (w.tiers !== undefined) {
      // The engine loop's afterSchedule: evicted blocks go down to G2 (their events first).
      w.tiers.offload(w.scheduler.blockManager.drainEvicted());
      for (const ob of w.plan.onboards) {
        if (!ob.inline) throw new Error('virtual fleet: only inline host onboards are modelled');
        copyMs += ob.sources.length * (this.options.hostCopyMsPerBlock ?? 0);
      }
    }
    if (w.plan.batch.sequences.length === 0) {
      // Nothing fits now: idle until the next arrival (a step of nothing would spin in place).
      w.scheduler.applyStepResult({ sampled: [] });
      w.plan = undefined;
      return;
    }
    const stepMs = stepTimeMs(this.model, w.engine.shapeOf(w.plan.batch)) / w.spec.speed;
    w.stepEndMs = this.nowMs + Math.max(stepMs, copyMs);
  }

  private finishStep(w: WorkerState): void {
    const out = w.scheduler.applyStepResult(mockResult(w.plan!));
    w.plan = undefined;
    w.stepEndMs = Infinity;
    // Tier moves before the device events of the same step (EngineLoop.publish).
    const data: KvEventData[] = [...(w.tiers?.drainEvents() ?? []), ...w.scheduler.blockManager.drainEvents()];
    for (const d of data) {
      if (this.router.config.useKvEvents) this.router.applyEvent({ workerId: w.spec.id, eventId: w.nextEventId++, data: d }, this.nowMs);
    }
    if (this.options.loadReports) {
      w.report = { workerId: w.spec.id, ...w.scheduler.load(), timestampMs: this.nowMs };
      if (w.tiers !== undefined) w.report.tiers = this.tierReport(w);
    }
    for (const o of out.outputs) {
      const outcome = this.outcomes.get(w.seqToRequest.get(o.seqId)!)!;
      if (outcome.firstTokenMs === undefined) {
        outcome.firstTokenMs = this.nowMs;
        outcome.cachedTokens = w.scheduler.getSequence(o.seqId)?.numCachedTokens ?? 0;
        this.router.onFirstToken(outcome.requestId, this.nowMs);
      }
    }
    for (const f of out.finished) {
      const requestId = w.seqToRequest.get(f.seqId)!;
      w.seqToRequest.delete(f.seqId);
      this.outcomes.get(requestId)!.endMs = this.nowMs;
      this.router.onFinished(requestId, this.nowMs, f.usage.completionTokens);
    }
    this.startStep(w);
  }

  /** What the worker's loop reports about its tiers (EngineLoop.tierReport): occupancy and the onboard / recompute costs. */
  private tierReport(w: WorkerState): LoadTierReport {
    const bs = this.router.config.blockSize;
    const copy = this.options.hostCopyMsPerBlock ?? 0;
    return {
      hostBlocks: w.tiers!.host.size,
      hostCapacity: w.tiers!.host.capacity,
      diskBlocks: 0,
      diskCapacity: 0,
      queryTokens: 0,
      hitTokens: { device: 0, host: 0, disk: 0 },
      onboardMsPerBlock: { host: copy, disk: Infinity },
      recomputeMsPerBlock: (this.model.prefillMs(1024 + bs) - this.model.prefillMs(1024)) / w.spec.speed,
    };
  }

  private worker(id: string): WorkerState {
    const w = this.workers.find((x) => x.spec.id === id);
    if (w === undefined) throw new Error(`virtual fleet: no worker ${id}`);
    return w;
  }
}

/** Poisson arrivals of distinct prompts (no shared prefix) of `isl` tokens. */
export function poissonRequests(opts: { count: number; ratePerS: number; isl: number; osl: number; seed: number; startMs?: number; prefix?: string }): VirtualRequest[] {
  const rng = new SeededRandom(opts.seed);
  const rand = () => 1 - rng.next(); // (0, 1]: log() stays finite
  const out: VirtualRequest[] = [];
  let t = opts.startMs ?? 0;
  for (let i = 0; i < opts.count; i++) {
    t += (-Math.log(rand()) / opts.ratePerS) * 1000;
    const base = Math.floor(rand() * 1e6) * 4096;
    out.push({ requestId: `${opts.prefix ?? 'r'}${i}`, atMs: t, tokens: Array.from({ length: opts.isl }, (_, k) => (base + k) % 30000), osl: opts.osl });
  }
  return out;
}
