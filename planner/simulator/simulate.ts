/**
 * Replays a binned trace through the fluid fleet model (fleet-model.ts), with pool sizes set by
 * the same Planner the live loop will run, or held static. Every `intervalS` the simulator
 * builds the Observation a live source would (traffic, TTFT and ITL measured over the interval,
 * pool replicas / ready / queue / KV usage), calls `planner.step`, and carries out decisions as
 * the virtual connector would: new workers become ready `startupS` later (and are paid for
 * while they start), removed ones stop at once.
 *
 * SLA attainment: a request meets the SLA when its TTFT ≤ target and its mean ITL ≤ target.
 * Requests of one tick share the tick's mean TTFT; their mean ITL averages the tick ITLs over
 * their decode (OSL × ITL long, from when their first token came), plus any wait for decode
 * admission spread over their tokens.
 */
import type { PerfModel } from '../../perf-model/index.js';
import { configuredPools, type PlannerConfig } from '../policy/config.js';
import type { Decision } from '../policy/decision.js';
import type { Observation, PoolName, PoolObservation } from '../policy/observation.js';
import { Planner } from '../policy/planner.js';
import { sizeAgg, sizeDecode, sizePrefill } from '../policy/sla-sizing.js';
import { FleetModel } from './fleet-model.js';
import type { TraceBins } from './trace.js';

export type SimPolicy = { kind: 'planner' } | { kind: 'static'; replicas: Partial<Record<PoolName, number>> };

export interface SimOptions {
  label: string;
  perf: PerfModel;
  trace: TraceBins;
  config: PlannerConfig;
  policy: SimPolicy;
  /** Seconds from a scale-up decision to the worker serving. */
  startupS: number;
  /** Planner runs: replicas at t = 0 (default: sized for the first interval's traffic). */
  initial?: Partial<Record<PoolName, number>>;
  /** Keep every decision (memory: pools × intervals). */
  keepDecisions?: boolean;
}

export interface TimelinePoint {
  tS: number;
  rps: number;
  replicas: Partial<Record<PoolName, number>>;
  ttftMs: number;
  itlMs: number;
}

export interface SimReport {
  label: string;
  requests: number;
  /** Share of requests with TTFT ≤ target and mean ITL ≤ target. */
  attainment: number;
  ttftAttainment: number;
  itlAttainment: number;
  workerHours: number;
  gpuHours: number;
  peakWorkers: number;
  meanWorkers: number;
  /** Scale actions carried out (planner runs). */
  actions: number;
  timeline: TimelinePoint[];
  decisions?: Decision[];
}

/** Pool sizes from the planner's SLA rules (targets × targetMargin) for one (rate, ISL, OSL), clamped to each pool's bounds. */
export function slaSizing(perf: PerfModel, config: PlannerConfig, rate: number, isl: number, osl: number): Partial<Record<PoolName, number>> {
  const s = config.sla;
  const ttftMs = s.ttftMs * s.targetMargin;
  const itlMs = s.itlMs * s.targetMargin;
  const out: Partial<Record<PoolName, number>> = {};
  const clamp = (pool: PoolName, n: number) => {
    const b = config.pools[pool]!;
    return Math.min(b.max, Math.max(b.allowZero ? b.min : Math.max(1, b.min), Math.ceil(n - 1e-9)));
  };
  if (config.pools.agg) out.agg = clamp('agg', sizeAgg(perf, rate, isl, osl, { ttftMs, itlMs, kvCapacityTokens: s.kvCapacityTokens, maxUtilization: s.maxUtilization }).replicas);
  if (config.pools.prefill) out.prefill = clamp('prefill', sizePrefill(perf, rate, isl, ttftMs, s.maxUtilization).replicas);
  if (config.pools.decode) out.decode = clamp('decode', sizeDecode(perf, rate, isl, osl, itlMs, s.kvCapacityTokens).replicas);
  return out;
}

interface Pool {
  ready: number;
  /** Workers starting, by the tick they become ready (ascending). */
  starting: { at: number; count: number }[];
}

const startingCount = (p: Pool) => p.starting.reduce((s, x) => s + x.count, 0);

export function simulate(o: SimOptions): SimReport {
  const { trace, config, perf } = o;
  const dt = trace.tickS;
  const T = trace.count.length;
  const names = configuredPools(config);
  const topology = config.pools.agg ? 'agg' : 'disagg';
  const model = new FleetModel(perf, config.sla.kvCapacityTokens, topology);
  const every = Math.max(1, Math.round(config.intervalS / dt));

  // per-tick outputs for the attainment pass
  const ttft = new Float64Array(T);
  const itlPrefix = new Float64Array(T + 1);
  const wait = new Float64Array(T);
  const isl = new Float64Array(T);
  const osl = new Float64Array(T);

  let lastIsl = trace.count[0]! > 0 ? trace.islSum[0]! / trace.count[0]! : 1000;
  let lastOsl = trace.count[0]! > 0 ? trace.oslSum[0]! / trace.count[0]! : 100;
  const initial = o.policy.kind === 'static' ? o.policy.replicas : (o.initial ?? firstIntervalSizing(o, every));
  const pools = new Map<PoolName, Pool>(names.map((n) => [n, { ready: initial[n] ?? 1, starting: [] }]));
  const planner = o.policy.kind === 'planner' ? new Planner(config, perf) : undefined;
  const decisions: Decision[] = [];
  const timeline: TimelinePoint[] = [];
  let actions = 0;
  let workerS = 0;
  let gpuS = 0;
  let peakWorkers = 0;
  // interval accumulators
  let aReq = 0;
  let aIsl = 0;
  let aOsl = 0;
  let aTtft = 0;
  let aItlW = 0;
  let aItl = 0;
  let aKv = 0;

  for (let t = 0; t < T; t++) {
    let workers = 0;
    for (const [name, p] of pools) {
      while (p.starting.length > 0 && p.starting[0]!.at <= t) p.ready += p.starting.shift()!.count;
      const n = p.ready + startingCount(p);
      workers += n;
      gpuS += n * config.pools[name]!.gpusPerWorker * dt;
    }
    workerS += workers * dt;
    peakWorkers = Math.max(peakWorkers, workers);

    const c = trace.count[t]!;
    if (c > 0) {
      lastIsl = trace.islSum[t]! / c;
      lastOsl = trace.oslSum[t]! / c;
    }
    isl[t] = lastIsl;
    osl[t] = lastOsl;
    const pN = topology === 'agg' ? pools.get('agg')!.ready : pools.get('prefill')!.ready;
    const dN = topology === 'agg' ? pN : pools.get('decode')!.ready;
    const out = model.tick({ dt, requests: c, isl: lastIsl, osl: lastOsl }, pN, dN);
    ttft[t] = out.ttftMs;
    wait[t] = out.decodeWaitMs;
    itlPrefix[t + 1] = itlPrefix[t]! + out.itlMs;

    aReq += c;
    aIsl += trace.islSum[t]!;
    aOsl += trace.oslSum[t]!;
    aTtft += c * Math.min(out.ttftMs, 60_000);
    aItl += out.itlMs * model.active;
    aItlW += model.active;
    aKv += model.kvUsage;

    if ((t + 1) % every !== 0) continue;
    const nowMs = (t + 1) * dt * 1000;
    const intervalS = every * dt;
    const seen: Partial<Record<PoolName, PoolObservation>> = {};
    for (const [name, p] of pools) {
      const queued = name === 'decode' ? 0 : model.prefillBacklogRequests * lastIsl;
      seen[name] = { replicas: p.ready + startingCount(p), ready: p.ready, queuedPrefillTokens: queued, kvUsage: name === 'prefill' ? 0 : aKv / every };
    }
    const obs: Observation = { nowMs, pools: seen, traffic: { requests: aReq, intervalS } };
    if (aReq > 0) Object.assign(obs.traffic, { meanIsl: aIsl / aReq, meanOsl: aOsl / aReq, ttftMs: aTtft / aReq });
    if (aItlW > 0) obs.traffic.itlMs = aItl / aItlW;
    timeline.push({ tS: nowMs / 1000, rps: aReq / intervalS, replicas: Object.fromEntries([...pools].map(([n, p]) => [n, p.ready + startingCount(p)])), ttftMs: obs.traffic.ttftMs ?? 0, itlMs: obs.traffic.itlMs ?? 0 });
    aReq = aIsl = aOsl = aTtft = aItl = aItlW = aKv = 0;
    if (!planner) continue;
    for (const d of planner.step(obs)) {
      if (o.keepDecisions) decisions.push(d);
      if (d.action === 'hold') continue;
      actions++;
      apply(pools.get(d.pool)!, d.target, t + Math.max(1, Math.round(o.startupS / dt)));
    }
  }

  const a = attainment(trace, ttft, itlPrefix, wait, osl, config.sla.ttftMs, config.sla.itlMs);
  const hours = (T * dt) / 3600;
  const report: SimReport = {
    label: o.label,
    requests: a.requests,
    attainment: a.both,
    ttftAttainment: a.ttft,
    itlAttainment: a.itl,
    workerHours: workerS / 3600,
    gpuHours: gpuS / 3600,
    peakWorkers,
    meanWorkers: workerS / 3600 / hours,
    actions,
    timeline,
  };
  if (o.keepDecisions) report.decisions = decisions;
  return report;
}

function firstIntervalSizing(o: SimOptions, every: number): Partial<Record<PoolName, number>> {
  let c = 0;
  let isl = 0;
  let osl = 0;
  const n = Math.min(every, o.trace.count.length);
  for (let i = 0; i < n; i++) {
    c += o.trace.count[i]!;
    isl += o.trace.islSum[i]!;
    osl += o.trace.oslSum[i]!;
  }
  return c > 0 ? slaSizing(o.perf, o.config, c / (n * o.trace.tickS), isl / c, osl / c) : {};
}

/** Carries out a target: start workers (ready `readyAt`), or cancel starting ones first, then stop ready ones. */
function apply(p: Pool, target: number, readyAt: number): void {
  const current = p.ready + startingCount(p);
  if (target > current) {
    p.starting.push({ at: readyAt, count: target - current });
    return;
  }
  let remove = current - target;
  while (remove > 0 && p.starting.length > 0) {
    const last = p.starting[p.starting.length - 1]!;
    const k = Math.min(remove, last.count);
    last.count -= k;
    remove -= k;
    if (last.count === 0) p.starting.pop();
  }
  p.ready -= remove;
}

function attainment(trace: TraceBins, ttft: Float64Array, itlPrefix: Float64Array, wait: Float64Array, osl: Float64Array, ttftTarget: number, itlTarget: number) {
  const T = ttft.length;
  const dt = trace.tickS;
  let requests = 0;
  let okTtft = 0;
  let okItl = 0;
  let okBoth = 0;
  for (let t = 0; t < T; t++) {
    const c = trace.count[t]!;
    if (c === 0) continue;
    requests += c;
    const f = ttft[t]!;
    const tOk = f <= ttftTarget;
    let iOk = false;
    if (Number.isFinite(f)) {
      const start = Math.min(T - 1, t + Math.floor(f / 1000 / dt));
      const stepMs = itlPrefix[start + 1]! - itlPrefix[start]!;
      const len = Math.max(1, Math.ceil((osl[t]! * stepMs) / 1000 / dt));
      const end = Math.min(T, start + len);
      const meanItl = (itlPrefix[end]! - itlPrefix[start]!) / (end - start) + wait[t]! / osl[t]!;
      iOk = meanItl <= itlTarget;
    }
    if (tOk) okTtft += c;
    if (iOk) okItl += c;
    if (tOk && iOk) okBoth += c;
  }
  const share = (k: number) => (requests > 0 ? k / requests : 1);
  return { requests, ttft: share(okTtft), itl: share(okItl), both: share(okBoth) };
}
