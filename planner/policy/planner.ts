/**
 * The planner: one `step(observation)` per interval returns one Decision per pool. Pure: the
 * clock is the observation's `nowMs`, the state is its own predictors, correction factors and
 * per-pool constraint state. The simulator and (later) the live loop call it the same way.
 *
 *   observation ─▶ predictors (rate, ISL, OSL) ─▶ sizing rule (sla | load) ─▶ desired
 *               ─▶ corrections, surge (sla)       constraints + budget ─▶ target ─▶ Decision
 *
 * SLA sizing covers two cases and takes the larger: the forecast (plus its error headroom) at
 * targetMargin × the targets, and the learnt surge (rate × (1 + surge)) at the full targets. The
 * second is there because no forecast sees a burst coming: a scale-up serves only after the
 * interval that reveals the burst plus the workers' start-up time (minutes on a GPU fleet), and
 * until then the pools in place must carry it. In the 24-hour benchmark (docs/planner.md) bursts
 * of 1.5–2× made up most of the missed requests; sizing for the recent surge costs far less
 * than provisioning for the peak.
 */
import type { PerfModel } from '../../perf-model/index.js';
import { makePredictor, type Predictor } from '../predictors/index.js';
import { configuredPools, validatePlannerConfig, type PlannerConfig } from './config.js';
import { applyBudget, constrainPool, freshPoolState, type BudgetEntry, type PoolState } from './constraints.js';
import { CorrectionFactors } from './corrections.js';
import type { Decision, Prediction, Rule } from './decision.js';
import { loadDecision } from './load-policy.js';
import type { Observation, PoolName, PoolObservation } from './observation.js';
import { decodeContext, expectedItlMs, expectedTtftMs, sizeAgg, sizeDecode, sizePrefill, type AggSizing, type DecodeSizing, type PrefillSizing } from './sla-sizing.js';

interface Ask {
  desired: number;
  rule: Rule;
  reason: string;
}

/** The sizing case `Planner.chooseSizing` picked for one pool, with the numbers its reason quotes. */
type SizingChoice =
  | { rule: 'sla.prefill'; surge: boolean; s: PrefillSizing; rate: number; ttftMs: number; drain: number }
  | { rule: 'sla.decode'; surge: boolean; s: DecodeSizing; rate: number; itlMs: number }
  | { rule: 'sla.agg'; surge: boolean; s: AggSizing; ttftMs: number; itlMs: number; drain: number };

const ceil = (x: number) => Math.max(0, Math.ceil(x - 1e-9));
/**
 * Cap on a learnt surge (3× the forecast): traffic that wakes from near zero is an unbounded
 * ratio, and headroom beyond this would be the peak-sized fleet the planner exists to avoid.
 */
export const MAX_SURGE = 2;
const f1 = (x: number) => x.toFixed(1);

export class Planner {
  readonly corrections = new CorrectionFactors();
  private readonly rate: Predictor;
  private readonly isl: Predictor;
  private readonly osl: Predictor;
  private readonly pools: PoolName[];
  private readonly state = new Map<PoolName, PoolState>();
  /** Smoothed squared error of the rate forecast (for the rateZ headroom). */
  private rateErrorVar = 0;
  /** Largest recent (measured ÷ forecast − 1) of the rate, decaying (sla.surgeHalfLifeS). */
  private surge = 0;
  /** Each pool's state before its last action, so a failed action can be taken back. */
  private readonly beforeAction = new Map<PoolName, PoolState>();

  constructor(
    readonly config: PlannerConfig,
    readonly perf: PerfModel,
  ) {
    validatePlannerConfig(config);
    this.rate = makePredictor(config.predictor);
    this.isl = makePredictor(config.predictor);
    this.osl = makePredictor(config.predictor);
    this.pools = configuredPools(config);
    for (const p of this.pools) this.state.set(p, freshPoolState());
  }

  /** The forecast for the next interval, once traffic has been seen. */
  prediction(): Prediction | undefined {
    const rate = this.rate.predict();
    const isl = this.isl.predict();
    const osl = this.osl.predict();
    if (rate === undefined || isl === undefined || osl === undefined) return undefined;
    const r = Math.max(0, rate);
    return { rate: r, isl: Math.max(1, isl), osl: Math.max(1, osl), plannedRate: r + this.config.sla.rateZ * Math.sqrt(this.rateErrorVar), surge: this.surge };
  }

  step(obs: Observation): Decision[] {
    const c = this.config;
    const t = obs.traffic;
    const observedRate = t.intervalS > 0 ? t.requests / t.intervalS : 0;
    if (c.mode === 'sla') this.learnCorrections(obs, observedRate);
    const forecast = this.rate.predict();
    if (forecast !== undefined) this.rateErrorVar = 0.8 * this.rateErrorVar + 0.2 * (observedRate - Math.max(0, forecast)) ** 2;
    this.learnSurge(observedRate, forecast, t.intervalS);
    this.rate.observe(observedRate);
    if (t.requests > 0 && t.meanIsl !== undefined) this.isl.observe(t.meanIsl);
    if (t.requests > 0 && t.meanOsl !== undefined) this.osl.observe(t.meanOsl);
    const prediction = c.mode === 'sla' ? this.prediction() : undefined;

    const entries: (BudgetEntry & { ask: Ask })[] = [];
    for (const pool of this.pools) {
      const seen = obs.pools[pool];
      const state = this.state.get(pool)!;
      const current = seen?.replicas ?? 0;
      if (state.pending && seen && ((seen.ready === state.pending.target && seen.replicas === state.pending.target) || obs.nowMs - state.pending.sinceMs > c.pendingTimeoutS * 1000)) {
        state.pending = undefined;
      }
      const ask = seen === undefined ? { desired: current, rule: 'no_signal' as const, reason: 'pool not observed' } : this.ask(pool, seen, prediction);
      const bounds = c.pools[pool]!;
      const r = constrainPool(current, ask.desired, bounds, state, c, obs.nowMs);
      this.state.set(pool, r.state);
      entries.push({ pool, current, target: r.target, gpusPerWorker: bounds.gpusPerWorker, limitedBy: r.limitedBy, ask });
    }
    applyBudget(entries, c.maxWorkers, c.maxGpus);

    return entries.map((e) => {
      const state = this.state.get(e.pool)!;
      const action = e.target > e.current ? 'up' : e.target < e.current ? 'down' : 'hold';
      if (action !== 'hold') {
        this.beforeAction.set(e.pool, { ...state });
        state.pending = { target: e.target, sinceMs: obs.nowMs };
        state.lastActionMs = obs.nowMs;
        if (action === 'down') state.downStreak = 0;
      }
      const d: Decision = { pool: e.pool, atMs: obs.nowMs, current: e.current, desired: e.ask.desired, target: e.target, action, rule: e.ask.rule, limitedBy: e.limitedBy, reason: e.ask.reason };
      if (prediction) d.prediction = prediction;
      if (c.mode === 'sla') d.corrections = { ttft: this.corrections.ttft, itl: this.corrections.itl };
      return d;
    });
  }

  /**
   * The connector could not carry out this interval's action on `pool`: forget it (pending,
   * cooldown clock) so that the next interval decides afresh and retries.
   */
  actionFailed(pool: PoolName): void {
    const before = this.beforeAction.get(pool);
    if (before) this.state.set(pool, { ...before });
    this.beforeAction.delete(pool);
  }

  /**
   * Someone else resized `pool` (the connector saw a count the planner never ordered): its
   * pending action is moot. The next step plans from the observed count.
   */
  externalChange(pool: PoolName): void {
    const state = this.state.get(pool);
    if (state) this.state.set(pool, { ...state, pending: undefined });
  }

  private ask(pool: PoolName, seen: PoolObservation, p: Prediction | undefined): Ask {
    const c = this.config;
    if (c.mode === 'load') return loadDecision(pool, seen, c.load.thresholds, c.load.contextLength);
    if (p === undefined) return { desired: seen.replicas, rule: 'no_signal', reason: 'no traffic observed yet: keep' };
    const choice = this.chooseSizing(pool, seen, p);
    const drain = 'drain' in choice ? choice.drain : 0;
    return { desired: ceil(choice.s.replicas + drain), rule: choice.rule, reason: sizingReason(choice, p, seen) };
  }

  /**
   * The SLA sizing case for one pool: the forecast (planned rate at the margin-scaled,
   * corrected targets) or the surge (rate × (1 + surge) at the full targets), whichever needs
   * more workers, plus the prefill backlog for pools that prefill.
   */
  private chooseSizing(pool: PoolName, seen: PoolObservation, p: Prediction): SizingChoice {
    const c = this.config;
    const m = c.sla.targetMargin;
    const ttft = (m * c.sla.ttftMs) / (c.sla.corrections ? this.corrections.ttft : 1);
    const itl = (m * c.sla.itlMs) / (c.sla.corrections ? this.corrections.itl : 1);
    const surgeRate = p.rate * (1 + p.surge);
    const fullTtft = c.sla.ttftMs / (c.sla.corrections ? this.corrections.ttft : 1);
    const fullItl = c.sla.itlMs / (c.sla.corrections ? this.corrections.itl : 1);
    if (pool === 'prefill') {
      const base = sizePrefill(this.perf, p.plannedRate, p.isl, ttft, c.sla.maxUtilization);
      const burst = p.surge > 0 ? sizePrefill(this.perf, surgeRate, p.isl, fullTtft, c.sla.maxUtilization) : base;
      const surge = burst.replicas > base.replicas;
      const s = surge ? burst : base;
      return { rule: 'sla.prefill', surge, s, rate: surge ? surgeRate : p.plannedRate, ttftMs: surge ? fullTtft : ttft, drain: backlogReplicas(seen, p.isl, s.serviceMs, c.intervalS) };
    }
    if (pool === 'decode') {
      const base = sizeDecode(this.perf, p.plannedRate, p.isl, p.osl, itl, c.sla.kvCapacityTokens);
      const burst = p.surge > 0 ? sizeDecode(this.perf, surgeRate, p.isl, p.osl, fullItl, c.sla.kvCapacityTokens) : base;
      const surge = burst.replicas > base.replicas;
      return { rule: 'sla.decode', surge, s: surge ? burst : base, rate: surge ? surgeRate : p.plannedRate, itlMs: surge ? fullItl : itl };
    }
    const targets = { ttftMs: ttft, itlMs: itl, kvCapacityTokens: c.sla.kvCapacityTokens, maxUtilization: c.sla.maxUtilization };
    const base = sizeAgg(this.perf, p.plannedRate, p.isl, p.osl, targets);
    const burst = p.surge > 0 ? sizeAgg(this.perf, surgeRate, p.isl, p.osl, { ...targets, ttftMs: fullTtft, itlMs: fullItl }) : base;
    const surge = burst.replicas > base.replicas;
    const s = surge ? burst : base;
    return { rule: 'sla.agg', surge, s, ttftMs: surge ? fullTtft : ttft, itlMs: surge ? fullItl : itl, drain: backlogReplicas(seen, p.isl, s.serviceMs, this.config.intervalS) };
  }

  /**
   * The surge sample of one interval: how far the measured rate ran above the forecast made for
   * it (0 when below). The remembered surge is the largest sample, halving every
   * `surgeHalfLifeS`, so one burst raises the headroom at once and a calm spell lets it fade.
   * Worked: forecast 1,000 req/s, measured 1,800 → sample 0.8; three hours later (half-life
   * 6 h) it is 0.8 × 2^(−1/2) = 0.566 unless a larger sample came.
   */
  private learnSurge(observedRate: number, forecast: number | undefined, intervalS: number): void {
    const halfLife = this.config.sla.surgeHalfLifeS;
    if (halfLife <= 0) return;
    this.surge *= Math.pow(0.5, intervalS / halfLife);
    if (forecast === undefined || !(forecast > 0)) return;
    this.surge = Math.max(this.surge, Math.min(MAX_SURGE, observedRate / forecast - 1));
  }

  /** Measured ÷ expected for the interval that just ended, at the pool sizes that served it. */
  private learnCorrections(obs: Observation, rate: number): void {
    const t = obs.traffic;
    if (!(t.requests > 0) || t.meanIsl === undefined) return;
    const sla = this.config.sla;
    const ctx = decodeContext(t.meanIsl, t.meanOsl ?? 1);
    const agg = obs.pools.agg;
    if (agg) {
      const share = agg.ready > 0 ? (rate * this.perf.prefillMs(t.meanIsl)) / 1000 / agg.ready : 1;
      const step = expectedItlMs(this.perf, agg.kvUsage, ctx, sla.kvCapacityTokens) ?? 0;
      if (!draining(agg, t.meanIsl)) this.corrections.observeTtft(t.ttftMs, expectedTtftMs(this.perf, rate, t.meanIsl, agg.ready, step));
      this.corrections.observeItl(t.itlMs, expectedItlMs(this.perf, agg.kvUsage, ctx, sla.kvCapacityTokens, share));
      return;
    }
    const prefill = obs.pools.prefill;
    const decode = obs.pools.decode;
    if (prefill && !draining(prefill, t.meanIsl)) this.corrections.observeTtft(t.ttftMs, expectedTtftMs(this.perf, rate, t.meanIsl, prefill.ready));
    if (decode) this.corrections.observeItl(t.itlMs, expectedItlMs(this.perf, decode.kvUsage, ctx, sla.kvCapacityTokens));
  }
}

/**
 * A queue longer than a steady M/D/1 queue gets at the utilizations we size for (under 4
 * prompts per worker up to ρ ≈ 0.9) is a backlog still draining after a burst or a scale-up:
 * its TTFT says nothing about the model's error, so no TTFT correction is learnt from it.
 */
function draining(pool: PoolObservation, isl: number): boolean {
  return pool.queuedPrefillTokens > 4 * Math.max(1, pool.ready) * isl;
}

/**
 * The reactive half of SLA mode: workers to clear the prompts already queued within one
 * interval, on top of the forecast. A burst shows up here one interval after it starts, before
 * any predictor would believe it. Worked: 300,000 queued tokens at ISL 3000 = 100 prompts ×
 * 65.84 ms = 6.58 worker-s; over a 60 s interval → +0.11 workers.
 */
export function backlogReplicas(pool: PoolObservation, isl: number, serviceMs: number, intervalS: number): number {
  if (pool.queuedPrefillTokens <= 0) return 0;
  return ((pool.queuedPrefillTokens / Math.max(1, isl)) * serviceMs) / 1000 / intervalS;
}

/** The decision's reason: the forecast (and the surge, when it won), then the sizing arithmetic. */
function sizingReason(choice: SizingChoice, p: Prediction, seen: PoolObservation): string {
  const head = `predicted ${f1(p.rate)} req/s (sized for ${f1(p.plannedRate)}), ISL ${Math.round(p.isl)}, OSL ${Math.round(p.osl)}`;
  const surgeHead = `surge ×${(1 + p.surge).toFixed(2)} → ${f1(p.rate * (1 + p.surge))} req/s at the full targets`;
  const what = choice.surge ? `${head}; ${surgeHead}` : head;
  const drainText = (drain: number) => (drain > 0 ? ` + backlog ${Math.round(seen.queuedPrefillTokens)} tokens drained in one interval ${drain.toFixed(2)}` : '');
  switch (choice.rule) {
    case 'sla.prefill': {
      const { s, rate, ttftMs } = choice;
      const flag = s.feasible ? '' : ` [TTFT target ${f1(ttftMs)} ms ≤ one prefill ${f1(s.serviceMs)} ms: infeasible, sized at ρ ${s.utilization}]`;
      return `${what}: ${f1(rate)} × ${f1(s.serviceMs)} ms ÷ ρ ${s.utilization.toFixed(3)} (TTFT ${f1(ttftMs)} ms) = ${s.replicas.toFixed(2)}${drainText(choice.drain)}${flag}`;
    }
    case 'sla.decode': {
      const { s, rate, itlMs } = choice;
      const pt = s.point;
      const flag = pt.feasible ? '' : ` [ITL target ${f1(itlMs)} ms below batch-1 step ${f1(pt.itlMs)} ms: infeasible]`;
      return `${what}: ${Math.round(rate * p.osl)} tok/s ÷ ${f1(pt.tokensPerS)} tok/s/worker (batch ${pt.batch}, KV ${pt.kvUsage.toFixed(2)}, ITL ${f1(pt.itlMs)} ≤ ${f1(itlMs)} ms at context ${Math.round(s.contextTokens)}) = ${s.replicas.toFixed(2)}${flag}`;
    }
    case 'sla.agg': {
      const { s, ttftMs, itlMs } = choice;
      const flag = s.feasible ? '' : ' [targets not reachable at any size]';
      return `${what}: ${s.replicas} workers → prefill share ${s.prefillShare.toFixed(3)}, decode batch ${s.point.batch} at ${f1(s.point.itlMs)} ms/step (TTFT ${f1(ttftMs)}, ITL ${f1(itlMs)} ms)${drainText(choice.drain)}${flag}`;
    }
  }
}
