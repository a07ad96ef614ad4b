/**
 * The simulator's input: arrivals binned into ticks (count, summed ISL, summed OSL per tick).
 * Binning is what lets a day at thousands of requests per second replay in seconds: the model
 * never sees a single request.
 *
 * Requests come from a Mooncake-format JSONL file (parseMooncakeTrace: the one parser of the
 * format, which `runtime bench` replays through planner/index.ts too, since planner/ may not
 * import bench/) or from synthetic.ts.
 */
import { ConfigError } from '../../runtime/errors.js';

export interface TraceBins {
  /** Seconds per tick. */
  tickS: number;
  count: Float64Array;
  islSum: Float64Array;
  oslSum: Float64Array;
}

/**
 * One line of a Mooncake trace, in the file's own field names:
 * `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [..]}`. Each hash id
 * names one block of prompt tokens (512 in Mooncake's traces); requests that list the same ids
 * in the same positions share that prefix. The simulator bins lengths only; the load generator
 * turns hash ids into shared prompt blocks.
 */
export interface TraceEntry {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export function emptyBins(ticks: number, tickS: number): TraceBins {
  return { tickS, count: new Float64Array(ticks), islSum: new Float64Array(ticks), oslSum: new Float64Array(ticks) };
}

/**
 * Parses Mooncake JSONL into entries sorted by timestamp (`hash_ids` may be absent: read as
 * none). ConfigError names the line of the first bad request.
 */
export function parseMooncakeTrace(text: string, source = 'trace'): TraceEntry[] {
  const entries: TraceEntry[] = [];
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
    const { timestamp, input_length, output_length } = raw;
    const hashIds = raw['hash_ids'] ?? [];
    if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) throw new ConfigError(`${source}:${i + 1}: timestamp must be a non-negative number of ms`);
    if (!Number.isInteger(input_length) || (input_length as number) < 1) throw new ConfigError(`${source}:${i + 1}: input_length must be a positive integer`);
    if (!Number.isInteger(output_length) || (output_length as number) < 1) throw new ConfigError(`${source}:${i + 1}: output_length must be a positive integer`);
    if (!Array.isArray(hashIds) || !hashIds.every((h) => Number.isInteger(h))) throw new ConfigError(`${source}:${i + 1}: hash_ids must be an array of integers`);
    entries.push({ timestamp, input_length: input_length as number, output_length: output_length as number, hash_ids: hashIds as number[] });
  }
  if (entries.length === 0) throw new ConfigError(`${source}: no requests`);
  entries.sort((a, b) => a.timestamp - b.timestamp);
  return entries;
}

/** Bins requests by arrival; the trace starts at its first timestamp. */
export function binTrace(requests: readonly TraceEntry[], tickS: number): TraceBins {
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const r of requests) {
    t0 = Math.min(t0, r.timestamp);
    t1 = Math.max(t1, r.timestamp);
  }
  const ticks = Math.floor((t1 - t0) / 1000 / tickS) + 1;
  const bins = emptyBins(ticks, tickS);
  for (const r of requests) {
    const i = Math.floor((r.timestamp - t0) / 1000 / tickS);
    bins.count[i]! += 1;
    bins.islSum[i]! += r.input_length;
    bins.oslSum[i]! += r.output_length;
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
