/**
 * Measurements → a profile file (perf-model schema v1, perf-model/README.md) plus what was
 * measured. Pure.
 *
 * The model sections the mocker and the planner read:
 *   prefill: tokens = the ISLs, ms = their median TTFT (each ISL fits one step, sweep.ts).
 *   decode:  a kvUsage × batchSize grid over the measured KV usages and concurrencies. The
 *            measured points are (context, concurrency), i.e. (kv = c·⌈ctx/block⌉/blocks,
 *            batch = c), which is no rectangle in (kv, batch); each cell is interpolated in
 *            (context, concurrency) instead (decodeGrid), so reading the grid at a measured
 *            (kv, batch) gives back its measured ITL.
 * The extra sections (`worker`, `measured`, `tool`) are informational: readers of schema v1
 * ignore fields they do not know, so the file stays version 1.
 */
import { interp, PERF_PROFILE_VERSION, type PerfProfile } from '../../perf-model/index.js';
import type { DecodeMeasurement, PrefillMeasurement } from './measure.js';

export interface ProfiledWorker {
  model: string;
  engine: string;
  contextLength: number;
  kvBlockSize: number;
  totalKvBlocks: number;
  /** totalKvBlocks × kvBlockSize: the planner's --kv-capacity-tokens. */
  kvCapacityTokens: number;
  maxNumBatchedTokens: number;
  /**
   * The model card's parameter counts: what the measured times stand for (a mixture of experts
   * runs its active share per token; a profile of it is its own and is used as it is).
   */
  parameters?: { total: number; active: number };
}

/** The file `runtime profile --out` writes: the v1 model plus what it came from. */
export interface ProfileReport extends PerfProfile {
  version: typeof PERF_PROFILE_VERSION;
  tool: { name: 'runtime profile'; createdAt: string; wallS: number };
  worker: ProfiledWorker;
  measured: { prefill: PrefillMeasurement[]; decode: DecodeMeasurement[] };
}

export function buildProfile(worker: ProfiledWorker, prefill: PrefillMeasurement[], decode: DecodeMeasurement[], createdAt: string, wallS: number): ProfileReport {
  if (prefill.length === 0) throw new RangeError('profile: no prefill point was measured');
  if (decode.length === 0) throw new RangeError('profile: no decode point was measured');
  const pre = [...prefill].sort((a, b) => a.isl - b.isl);
  return {
    version: PERF_PROFILE_VERSION,
    prefill: { tokens: pre.map((p) => p.isl), ms: monotone(pre.map((p) => round3(p.ttftMs))) },
    decode: decodeGrid(decode, worker.kvCapacityTokens),
    tool: { name: 'runtime profile', createdAt, wallS: round3(wallS) },
    worker,
    measured: { prefill: pre, decode },
  };
}

/**
 * The kvUsage × batchSize grid through the measured points (see the file comment). A cell
 * (kv, b) implies a context x = kv · capacity ÷ b. Within each measured context length, ITL and
 * x are interpolated over concurrency at b (held at the ends); then ITL is interpolated over x
 * between the context lengths (held at the ends). At a measured (kv, c) this returns its ITL.
 */
export function decodeGrid(points: readonly DecodeMeasurement[], capacityTokens: number): { kvUsage: number[]; batchSize: number[]; ms: number[][] } {
  const kvUsage = [...new Set(points.map((p) => round6(p.kvUsage)))].sort((a, b) => a - b);
  const batchSize = [...new Set(points.map((p) => p.concurrency))].sort((a, b) => a - b);
  const groups = new Map<number, DecodeMeasurement[]>();
  for (const p of points) groups.set(p.contextLength, [...(groups.get(p.contextLength) ?? []), p]);
  const curves = [...groups.values()].map((g) => {
    const sorted = [...g].sort((a, b) => a.concurrency - b.concurrency);
    const cs = sorted.map((p) => p.concurrency);
    return { cs, xs: sorted.map((p) => (round6(p.kvUsage) * capacityTokens) / p.concurrency), ys: sorted.map((p) => p.itlMs) };
  });
  const at = (kv: number, b: number): number => {
    const byX = curves.map((c) => ({ x: interp(c.cs, c.xs, b, false), y: interp(c.cs, c.ys, b, false) })).sort((p, q) => p.x - q.x);
    return interp(byX.map((p) => p.x), byX.map((p) => p.y), (kv * capacityTokens) / b, false);
  };
  return { kvUsage, batchSize, ms: kvUsage.map((kv) => batchSize.map((b) => round3(Math.max(0.001, at(kv, b))))) };
}

/**
 * Prefill time must not fall as tokens grow (the perf-model contract); noise at the small end can
 * make it dip, so each value is at least the one before.
 */
function monotone(ms: number[]): number[] {
  for (let i = 1; i < ms.length; i++) ms[i] = Math.max(ms[i]!, ms[i - 1]!);
  return ms;
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function round6(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}
