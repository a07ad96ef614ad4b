/**
 * The planner: one `step(observation)` per interval returns one Decision per pool. Pure: the
 * clock is the observation's `nowMs`, the state is its own predictors, correction factors and
 * per-pool constraint state. The simulator and (later) the live loop call it the same way.
 *
 *   observation ─▶ predictors (rate, ISL, OSL) ─▶ sizing rule (sla | load) ─▶ desired
 *               ─▶ corrections (sla)              constraints + budget ─▶ target ─▶ Decision
 */
import type { PerfModel } from '../../perf-model/index.js';
import { makePredictor, type Predictor } from '../predictors/index.js';
import { validatePlannerConfig, type PlannerConfig } from './config.js';
import { applyBudget, constrainPool, freshPoolState, type BudgetEntry, type PoolState } from './constraints.js';
import { CorrectionFactors } from './corrections.js';
import type { Decision, Prediction, Rule } from './decision.js';
import { loadDecision } from './load-policy.js';
import type { Observation, PoolName, PoolObservation } from './observation.js';
import { decodeContext, expectedItlMs, expectedTtftMs, sizeAgg, sizeDecode, sizePrefill } from './sla-sizing.js';

interface Ask {
  desired: number;
  rule: Rule;
  reason: string;
}

const ceil = (x: number) => Math.max(0, Math.ceil(x - 1e-9));
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
    this.pools = (['agg', 'prefill', 'decode'] as const).filter((p) => config.pools[p] !== undefined);
    for (const p of this.pools) this.state.set(p, freshPoolState());
  }

  /** The forecast for the next interval, once traffic has been seen. */
  prediction(): Prediction | undefined {
    const rate = this.rate.predict();
    const isl = this.isl.predict();
    const osl = this.osl.predict();
    if (rate === undefined || isl === undefined || osl === undefined) return undefined;
    const r = Math.max(0, rate);
    return { rate: r, isl: Math.max(1, isl), osl: Math.max(1, osl), plannedRate: r + this.config.sla.rateZ * Math.sqrt(this.rateErrorVar) };
  }

  step(obs: Observation): Decision[] {
    const c = this.config;
    const t = obs.traffic;
    const observedRate = t.intervalS > 0 ? t.requests / t.intervalS : 0;
    if (c.mode === 'sla') this.learnCorrections(obs, observedRate);
    const forecast = this.rate.predict();
    if (forecast !== undefined) this.rateErrorVar = 0.8 * this.rateErrorVar + 0.2 * (observedRate - Math.max(0, forecast)) ** 2;
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
    const m = c.sla.targetMargin;
    const ttft = (m * c.sla.ttftMs) / (c.sla.corrections ? this.corrections.ttft : 1);
    const itl = (m * c.sla.itlMs) / (c.sla.corrections ? this.corrections.itl : 1);
    const head = `predicted ${f1(p.rate)} req/s (sized for ${f1(p.plannedRate)}), ISL ${Math.round(p.isl)}, OSL ${Math.round(p.osl)}`;
    const rate = p.plannedRate;
    if (pool === 'prefill') {
      const s = sizePrefill(this.perf, rate, p.isl, ttft, c.sla.maxUtilization);
      const flag = s.feasible ? '' : ` [TTFT target ${f1(ttft)} ms ≤ one prefill ${f1(s.serviceMs)} ms: infeasible, sized at ρ ${s.utilization}]`;
      const drain = backlogReplicas(seen, p.isl, s.serviceMs, c.intervalS);
      const drainText = drain > 0 ? ` + backlog ${Math.round(seen.queuedPrefillTokens)} tokens drained in one interval ${drain.toFixed(2)}` : '';
      return { desired: ceil(s.replicas + drain), rule: 'sla.prefill', reason: `${head}: ${f1(rate)} × ${f1(s.serviceMs)} ms ÷ ρ ${s.utilization.toFixed(3)} (TTFT ${f1(ttft)} ms) = ${s.replicas.toFixed(2)}${drainText}${flag}` };
    }
    if (pool === 'decode') {
      const s = sizeDecode(this.perf, rate, p.isl, p.osl, itl, c.sla.kvCapacityTokens);
      const pt = s.point;
      const flag = pt.feasible ? '' : ` [ITL target ${f1(itl)} ms below batch-1 step ${f1(pt.itlMs)} ms: infeasible]`;
      return {
        desired: ceil(s.replicas),
        rule: 'sla.decode',
        reason: `${head}: ${Math.round(rate * p.osl)} tok/s ÷ ${f1(pt.tokensPerS)} tok/s/worker (batch ${pt.batch}, KV ${pt.kvUsage.toFixed(2)}, ITL ${f1(pt.itlMs)} ≤ ${f1(itl)} ms at context ${Math.round(s.contextTokens)}) = ${s.replicas.toFixed(2)}${flag}`,
      };
    }
    const s = sizeAgg(this.perf, rate, p.isl, p.osl, { ttftMs: ttft, itlMs: itl, kvCapacityTokens: c.sla.kvCapacityTokens, maxUtilization: c.sla.maxUtilization });
    const flag = s.feasible ? '' : ' [targets not reachable at any size]';
    const drain = backlogReplicas(seen, p.isl, s.serviceMs, c.intervalS);
    const drainText = drain > 0 ? ` + backlog ${Math.round(seen.queuedPrefillTokens)} tokens drained in one interval ${drain.toFixed(2)}` : '';
    return {
      desired: ceil(s.replicas + drain),
      rule: 'sla.agg',
      reason: `${head}: ${s.replicas} workers → prefill share ${s.prefillShare.toFixed(3)}, decode batch ${s.point.batch} at ${f1(s.point.itlMs)} ms/step (TTFT ${f1(ttft)}, ITL ${f1(itl)} ms)${drainText}${flag}`,
    };
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
