/**
 * The simulator's input: arrivals binned into ticks (count, summed ISL, summed OSL per tick).
 * Binning is what lets a day at thousands of requests per second replay in seconds: the model
 * never sees a single request.
 *
 * Requests come from a Mooncake-format JSONL file (`{"timestamp": ms, "input_length": n,
 * "output_length": m, ...}` per line, the format `runtime bench make-trace` writes; read here
 * with a reader of our own because planner/ may not import bench/) or from synthetic.ts.
 */
import { ConfigError } from '../../runtime/errors.js';

export interface TraceBins {
  /** Seconds per tick. */
  tickS: number;
  count: Float64Array;
  islSum: Float64Array;
  oslSum: Float64Array;
}

export interface TraceRequest {
  timestampMs: number;
  isl: number;
  osl: number;
}

export function emptyBins(ticks: number, tickS: number): TraceBins {
  return { tickS, count: new Float64Array(ticks), islSum: new Float64Array(ticks), oslSum: new Float64Array(ticks) };
}

/** Parses Mooncake JSONL; ConfigError names the line of the first bad request. */
export function parseMooncakeTrace(text: string, source = 'trace'): TraceRequest[] {
  const out: TraceRequest[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw new ConfigError(`${source}:${i + 1}: not JSON`);
    }
    const ts = raw['timestamp'];
    const isl = raw['input_length'];
    const osl = raw['output_length'];
    if (typeof ts !== 'number' || !Number.isFinite(ts) || ts < 0) throw new ConfigError(`${source}:${i + 1}: timestamp must be a non-negative number of ms`);
    if (!Number.isInteger(isl) || (isl as number) < 1) throw new ConfigError(`${source}:${i + 1}: input_length must be a positive integer`);
    if (!Number.isInteger(osl) || (osl as number) < 1) throw new ConfigError(`${source}:${i + 1}: output_length must be a positive integer`);
    out.push({ timestampMs: ts, isl: isl as number, osl: osl as number });
  }
  if (out.length === 0) throw new ConfigError(`${source}: no requests`);
  return out;
}

/** Bins requests by arrival; the trace starts at its first timestamp. */
export function binTrace(requests: readonly TraceRequest[], tickS: number): TraceBins {
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const r of requests) {
    t0 = Math.min(t0, r.timestampMs);
    t1 = Math.max(t1, r.timestampMs);
  }
  const ticks = Math.floor((t1 - t0) / 1000 / tickS) + 1;
  const bins = emptyBins(ticks, tickS);
  for (const r of requests) {
    const i = Math.floor((r.timestampMs - t0) / 1000 / tickS);
    bins.count[i]! += 1;
    bins.islSum[i]! += r.isl;
    bins.oslSum[i]! += r.osl;
  }
  return bins;
}

export interface TraceSummary {
  requests: number;
  durationS: number;
  meanRps: number;
  /** Highest mean rate over any window of `windowS`. */
  peakRps: number;
  meanIsl: number;
  meanOsl: number;
}

export function summarizeTrace(b: TraceBins, windowS: number): TraceSummary {
  const n = b.count.length;
  const w = Math.max(1, Math.round(windowS / b.tickS));
  let requests = 0;
  let isl = 0;
  let osl = 0;
  let peak = 0;
  let windowSum = 0;
  for (let i = 0; i < n; i++) {
    requests += b.count[i]!;
    isl += b.islSum[i]!;
    osl += b.oslSum[i]!;
    windowSum += b.count[i]!;
    if (i >= w) windowSum -= b.count[i - w]!;
    if (i >= w - 1 || i === n - 1) peak = Math.max(peak, windowSum / (Math.min(w, i + 1) * b.tickS));
  }
  const durationS = n * b.tickS;
  return { requests, durationS, meanRps: requests / durationS, peakRps: peak, meanIsl: requests > 0 ? isl / requests : 0, meanOsl: requests > 0 ? osl / requests : 0 };
}
