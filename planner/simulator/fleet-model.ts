/**
 * The fluid model of the pools, advanced one tick at a time. Workers of a pool are assumed
 * evenly loaded (the router balances them), so a pool is its count plus aggregate state:
 *
 *   prefill  backlog of prefill work (worker-seconds). A tick adds c·S (S = prefillMs(ISL)) and
 *            serves n·dt. The cohort arriving in the tick sees
 *              TTFT = S + backlog / n + M/D/1 wait at the tick's arrival utilization,
 *            the fluid backlog carrying overload from tick to tick and the M/D/1 term the
 *            Poisson queueing a fluid model would otherwise miss below saturation.
 *   decode   active sequences and an admission queue. A worker fits kvCapacity / context
 *            sequences; per-worker batch b = active / n, KV usage p = b·context / kvCapacity,
 *            step = decodeMs(p, b) is the tick's ITL; each sequence gets dt/step tokens, and
 *            active·(tokens/OSL) finish (a fluid drain).
 *   agg      one pool doing both in mixed steps: prefill takes a share u of the time first,
 *            decode steps get the rest, so ITL = step / (1 − u) and TTFT adds one step.
 *
 * Limits (see docs/planner.md): per-tick means only (no ISL/OSL spread inside a tick), perfect
 * balancing, no prefix-cache hits, no KV transfer time, and drained workers' sequences stay on
 * the remaining ones.
 */
import type { PerfModel } from '../../perf-model/index.js';
import { mdWaitMs } from '../policy/sla-sizing.js';

/** Cap on the M/D/1 term's utilization: above it the fluid backlog takes over. */
const MD1_RHO_CAP = 0.97;
/** Decode keeps at least this share of an agg worker's time. */
const MIN_DECODE_SHARE = 0.05;
/**
 * Time constant (s) of the arrival rate the M/D/1 term sees. The formula already prices in
 * Poisson randomness; feeding it each 1-s tick's own count would count that noise twice.
 */
const ARRIVAL_SMOOTHING_S = 30;

export interface TickInput {
  dt: number;
  requests: number;
  isl: number;
  osl: number;
}

export interface TickOutput {
  /** Mean TTFT (ms) of the requests that arrived this tick; Infinity if no worker can serve them. */
  ttftMs: number;
  /** Time between tokens this tick (ms). */
  itlMs: number;
  /** Extra wait (ms) before decode starts, spread over the cohort's tokens by the caller. */
  decodeWaitMs: number;
}

export class FleetModel {
  prefillBacklogS = 0;
  /** Requests waiting for prefill (for queued-token observations). */
  prefillBacklogRequests = 0;
  active = 0;
  waiting = 0;
  kvUsage = 0;
  /** Prefill share of agg worker time in the last tick. */
  prefillShare = 0;
  private smoothedWork: number | undefined;
  /** Mean context of the active sequences (admission-weighted), so one tick's ISL moves only its own cohort. */
  private activeCtx = 0;

  constructor(
    private readonly perf: PerfModel,
    private readonly kvCapacityTokens: number,
    readonly topology: 'agg' | 'disagg',
  ) {}

  /** Advances one tick with `prefillN` / `decodeN` ready workers (agg: both are the agg count). */
  tick(input: TickInput, prefillN: number, decodeN: number): TickOutput {
    const { dt, requests: c, isl, osl } = input;
    const s = this.perf.prefillMs(isl) / 1000;
    const agg = this.topology === 'agg';
    const work = c * s;
    const cap = prefillN * dt;
    const before = this.prefillBacklogS;
    this.prefillBacklogS = Math.max(0, before + work - cap);
    const servedWork = before + work - this.prefillBacklogS;
    this.prefillBacklogRequests = this.prefillBacklogS / s;
    const served = servedWork / s;
    const a = Math.min(1, dt / ARRIVAL_SMOOTHING_S);
    this.smoothedWork = this.smoothedWork === undefined ? work : (1 - a) * this.smoothedWork + a * work;
    const rhoArrivals = cap > 0 ? this.smoothedWork / cap : Infinity;
    this.prefillShare = agg && cap > 0 ? Math.min(1 - MIN_DECODE_SHARE, servedWork / cap) : 0;

    // decode (before computing TTFT: an agg prompt waits for the step in flight)
    const newCtx = isl + osl / 2;
    this.waiting += served;
    const fit = decodeN > 0 ? (decodeN * this.kvCapacityTokens) / newCtx : 0;
    const admit = Math.min(this.waiting, Math.max(0, fit - this.active));
    this.activeCtx = this.active + admit > 0 ? (this.active * this.activeCtx + admit * newCtx) / (this.active + admit) : newCtx;
    const ctx = this.activeCtx;
    this.active += admit;
    this.waiting -= admit;
    const b = decodeN > 0 ? this.active / decodeN : 0;
    this.kvUsage = Math.min(1, (b * ctx) / this.kvCapacityTokens);
    const stepMs = this.perf.decodeMs(this.kvUsage, Math.max(1, b));
    const itlMs = stepMs / (1 - this.prefillShare);
    const tokensPerSeq = (dt * 1000) / itlMs;
    const done = Math.min(this.active, (this.active * tokensPerSeq) / osl);
    this.active -= done;
    const decodeWaitMs = this.waiting > 0 ? (this.waiting / Math.max(done, 1e-9)) * dt * 1000 : 0;

    let ttftMs: number;
    if (prefillN <= 0) ttftMs = Infinity;
    else {
      const backlogWaitS = (before + this.prefillBacklogS) / 2 / prefillN;
      ttftMs = s * 1000 + backlogWaitS * 1000 + mdWaitMs(Math.min(rhoArrivals, MD1_RHO_CAP), s * 1000) + (agg ? stepMs : 0);
    }
    return { ttftMs, itlMs, decodeWaitMs };
  }
}
