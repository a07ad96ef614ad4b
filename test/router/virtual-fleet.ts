/**
 * A fleet of mocker workers in virtual time, behind a real `KvRouter`: each worker is the real
 * `Scheduler` (continuous batching, chunked prefill, prefix cache) stepping for exactly the time
 * the mocker would sleep (`stepTimeMs` of `MockerEngine.shapeOf`, divided by its speed), and the
 * router sees only what it sees in production: its own bookings, first tokens and stream ends.
 * Measurements are exact (no timers, no machine load), so "within 15%" tests the model, not
 * the box. Events are processed in time order: arrivals, then step ends.
 */
import { KvRouter } from '../../router/kv-router.js';
import { SeededRandom } from '../../runtime/random.js';
import type { CostRow } from '../../router/cost.js';
import { PolynomialPerfModel, stepTimeMs, type PerfModel } from '../../perf-model/index.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import type { SchedulePlan } from '../../workers/scheduler/types.js';
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

export interface VirtualOutcome {
  requestId: string;
  workerId: string;
  arrivalMs: number;
  promptTokens: number;
  /** The chosen worker's cost row at routing time (with `latency` under the latency cost). */
  row: CostRow;
  firstTokenMs?: number;
  endMs?: number;
}

interface WorkerState {
  spec: VirtualWorkerSpec;
  scheduler: Scheduler;
  engine: MockerEngine;
  plan: SchedulePlan | undefined;
  stepEndMs: number;
  seqToRequest: Map<number, string>;
  nextEventId: number;
}

export class VirtualFleet {
  private readonly workers: WorkerState[];
  readonly outcomes = new Map<string, VirtualOutcome>();
  nowMs = 0;

  constructor(
    specs: readonly VirtualWorkerSpec[],
    readonly router: KvRouter,
    private readonly model: PerfModel = new PolynomialPerfModel(),
  ) {
    this.workers = specs.map((spec) => {
      const numBlocks = spec.numBlocks ?? 4096;
      return {
        spec,
        scheduler: new Scheduler({ numBlocks, blockSize: router.config.blockSize }),
        engine: new MockerEngine({ numBlocks, blockSize: router.config.blockSize, perfModel: model }),
        plan: undefined,
        stepEndMs: Infinity,
        seqToRequest: new Map(),
        nextEventId: 0,
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
      if (arrival === Infinity && stepEnd === Infinity) break;
      if (arrival <= stepEnd) {
        this.nowMs = arrival;
        const o = this.arrive(requests[next++]!);
        done.push(o);
        onRouted?.(o);
      } else {
        this.nowMs = stepEnd;
        for (const w of busy) if (w.stepEndMs === stepEnd) this.finishStep(w);
      }
    }
    return done;
  }

  private arrive(r: VirtualRequest): VirtualOutcome {
    const candidates = this.workers.map((w) => ({ instanceId: w.spec.id, totalBlocks: w.scheduler.blockManager.numBlocks }));
    const result = this.router.route({ requestId: r.requestId, tokens: r.tokens }, candidates, this.nowMs);
    if (result.kind !== 'routed') throw new Error(`virtual fleet: ${result.kind}`);
    const d = result.decision;
    const w = this.worker(d.instanceId);
    const added = w.scheduler.addSequence({ requestId: r.requestId, promptTokenIds: r.tokens, sampling: {}, stop: stopOpts(r.osl), requestSeed: 1 });
    if (added.type !== 'added') throw new Error(`virtual fleet: ${added.message}`);
    w.seqToRequest.set(added.seqId, r.requestId);
    const outcome: VirtualOutcome = { requestId: r.requestId, workerId: d.instanceId, arrivalMs: this.nowMs, promptTokens: r.tokens.length, row: d.costs.find((c) => c.instanceId === d.instanceId)! };
    this.outcomes.set(r.requestId, outcome);
    if (w.plan === undefined) this.startStep(w);
    return outcome;
  }

  private startStep(w: WorkerState): void {
    if (!w.scheduler.hasWork) return;
    w.plan = w.scheduler.schedule();
    w.stepEndMs = this.nowMs + stepTimeMs(this.model, w.engine.shapeOf(w.plan.batch)) / w.spec.speed;
  }

  private finishStep(w: WorkerState): void {
    const out = w.scheduler.applyStepResult(mockResult(w.plan!));
    w.plan = undefined;
    w.stepEndMs = Infinity;
    for (const data of w.scheduler.blockManager.drainEvents()) {
      if (this.router.config.useKvEvents) this.router.applyEvent({ workerId: w.spec.id, eventId: w.nextEventId++, data }, this.nowMs);
    }
    for (const o of out.outputs) {
      const outcome = this.outcomes.get(w.seqToRequest.get(o.seqId)!)!;
      if (outcome.firstTokenMs === undefined) {
        outcome.firstTokenMs = this.nowMs;
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
