/**
 * SLA sizing: replicas per pool from a performance model, a predicted load and the TTFT / ITL
 * targets. Pure arithmetic; test/planner/sla-sizing.test.ts works each formula by hand.
 *
 * Prefill (one prompt per step, FIFO): a worker serves a prompt of ISL tokens in
 * S = prefillMs(ISL). With Poisson arrivals it is an M/D/1 queue, so at utilization ρ the mean
 * TTFT is S + ρ·S / (2(1 − ρ)). Holding that ≤ T gives the highest usable utilization
 *   k = (T − S) / S,   ρ* = 2k / (1 + 2k)      (capped by maxUtilization)
 * and replicas = rate · S / ρ*. This is "the profiled prefill throughput (1000 / S prompts/s)
 * at the predicted ISL, under the TTFT target".
 *
 * Decode: a worker holding b sequences of context c uses p = b·c / kvCapacity of its KV; one
 * step takes decodeMs(p, b), which is the ITL, and yields b tokens. Of the batch sizes whose ITL
 * meets the target, take the one with the most tokens/s; replicas = rate · OSL / that. Context
 * is ISL + OSL/2, a sequence's mean length over its decode.
 *
 * Aggregated: one worker does both, in mixed steps. If prefill takes a share u of its time,
 * decode steps come (1 − u) as often, so a sequence sees ITL = stepMs / (1 − u) and a prompt
 * waits one decode step before its own prefill. The rule: the smallest n such that
 *   u = rate·S / n ≤ ρ*(S, T − stepMs)    and    n · b·(1 − u)·1000/stepMs ≥ rate · OSL,
 * with the decode point chosen for the tighter ITL target T_itl · (1 − u).
 */
import type { PerfModel } from '../../perf-model/index.js';

/** Utilization used when the TTFT target is below one unloaded prefill (flagged infeasible). */
export const INFEASIBLE_UTILIZATION = 0.5;

/** Mean M/D/1 queueing delay at utilization ρ with service time S; Infinity at ρ ≥ 1. */
export function mdWaitMs(rho: number, serviceMs: number): number {
  if (rho <= 0) return 0;
  if (rho >= 1) return Infinity;
  return (rho * serviceMs) / (2 * (1 - rho));
}

/** Highest utilization whose M/D/1 mean TTFT (S + wait) is ≤ target; 0 when S ≥ target. */
export function maxUtilizationForTtft(serviceMs: number, ttftMs: number): number {
  if (ttftMs <= serviceMs) return 0;
  const k = (ttftMs - serviceMs) / serviceMs;
  return (2 * k) / (1 + 2 * k);
}

export interface PrefillSizing {
  /** Fractional workers needed (ceil it for a count). */
  replicas: number;
  serviceMs: number;
  utilization: number;
  feasible: boolean;
}

export function sizePrefill(perf: PerfModel, rate: number, isl: number, ttftMs: number, maxUtilization: number): PrefillSizing {
  const serviceMs = perf.prefillMs(isl);
  const rho = maxUtilizationForTtft(serviceMs, ttftMs);
  const feasible = rho > 0;
  const utilization = feasible ? Math.min(rho, maxUtilization) : INFEASIBLE_UTILIZATION;
  return { replicas: (rate * serviceMs) / 1000 / utilization, serviceMs, utilization, feasible };
}

export interface DecodePoint {
  batch: number;
  kvUsage: number;
  itlMs: number;
  tokensPerS: number;
  feasible: boolean;
}

/** The batch with the most tokens/s whose step time meets `itlMs` at this context length. */
export function decodeOperatingPoint(perf: PerfModel, contextTokens: number, itlMs: number, kvCapacityTokens: number): DecodePoint {
  const ctx = Math.max(1, contextTokens);
  const maxBatch = Math.max(1, Math.floor(kvCapacityTokens / ctx));
  let best: DecodePoint | undefined;
  for (let b = 1; b <= maxBatch; b++) {
    const kvUsage = Math.min(1, (b * ctx) / kvCapacityTokens);
    const ms = perf.decodeMs(kvUsage, b);
    if (ms > itlMs) continue;
    const tokensPerS = (b * 1000) / ms;
    if (best === undefined || tokensPerS > best.tokensPerS) best = { batch: b, kvUsage, itlMs: ms, tokensPerS, feasible: true };
  }
  if (best) return best;
  const kvUsage = Math.min(1, ctx / kvCapacityTokens);
  const ms = perf.decodeMs(kvUsage, 1);
  return { batch: 1, kvUsage, itlMs: ms, tokensPerS: 1000 / ms, feasible: false };
}

export interface DecodeSizing {
  replicas: number;
  contextTokens: number;
  point: DecodePoint;
}

export function decodeContext(isl: number, osl: number): number {
  return isl + osl / 2;
}

export function sizeDecode(perf: PerfModel, rate: number, isl: number, osl: number, itlMs: number, kvCapacityTokens: number): DecodeSizing {
  const contextTokens = decodeContext(isl, osl);
  const point = decodeOperatingPoint(perf, contextTokens, itlMs, kvCapacityTokens);
  return { replicas: (rate * osl) / point.tokensPerS, contextTokens, point };
}

export interface AggSizing {
  /** Whole workers (the rule searches integers). */
  replicas: number;
  serviceMs: number;
  /** Prefill share of each worker's time at that count. */
  prefillShare: number;
  point: DecodePoint;
  feasible: boolean;
}

export interface AggTargets {
  ttftMs: number;
  itlMs: number;
  kvCapacityTokens: number;
  maxUtilization: number;
}

export function sizeAgg(perf: PerfModel, rate: number, isl: number, osl: number, t: AggTargets): AggSizing {
  const serviceMs = perf.prefillMs(isl);
  const ctx = decodeContext(isl, osl);
  const prefillLoad = (rate * serviceMs) / 1000; // worker-seconds of prefill per second
  const decodeTokens = rate * osl;
  const check = (n: number): AggSizing => {
    const u = prefillLoad / n;
    const point = decodeOperatingPoint(perf, ctx, t.itlMs * Math.max(0, 1 - u), t.kvCapacityTokens);
    const rhoMax = Math.min(t.maxUtilization, maxUtilizationForTtft(serviceMs, t.ttftMs - point.itlMs));
    const capacity = n * point.tokensPerS * (1 - u);
    const feasible = u < 1 && u <= rhoMax && point.feasible && capacity >= decodeTokens;
    return { replicas: n, serviceMs, prefillShare: u, point, feasible };
  };
  if (rate <= 0) return { ...check(1), feasible: true };
  // Feasibility is monotone in n: more workers lower u, which loosens both conditions.
  let hi = 1;
  while (!check(hi).feasible && hi < 1 << 24) hi *= 2;
  if (!check(hi).feasible) return check(hi); // the targets cannot be met at any size: flagged
  let lo = 0; // check(lo) fails or lo = 0
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (check(mid).feasible) hi = mid;
    else lo = mid;
  }
  return check(hi);
}

/**
 * Expected mean TTFT for what was observed: the M/D/1 figure at the pool's size, plus any
 * decode step a prompt waits for (agg). Undefined when the queue is at or near saturation
 * (ρ ≥ 0.95): there the steady-state formula says nothing, so no correction is learnt.
 */
export function expectedTtftMs(perf: PerfModel, rate: number, isl: number, replicas: number, extraMs = 0): number | undefined {
  if (replicas <= 0 || rate <= 0) return undefined;
  const s = perf.prefillMs(isl);
  const rho = (rate * s) / 1000 / replicas;
  if (rho >= 0.95) return undefined;
  return s + extraMs + mdWaitMs(rho, s);
}

/** Expected ITL at the observed KV usage; batch from usage × capacity ÷ context; agg pays the prefill share. */
export function expectedItlMs(perf: PerfModel, kvUsage: number, contextTokens: number, kvCapacityTokens: number, prefillShare = 0): number | undefined {
  if (kvUsage <= 0 || prefillShare >= 1) return undefined;
  const batch = Math.max(1, (kvUsage * kvCapacityTokens) / Math.max(1, contextTokens));
  return perf.decodeMs(kvUsage, batch) / (1 - prefillShare);
}
