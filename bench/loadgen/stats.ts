/**
 * Distribution summaries. Percentiles interpolate linearly between order statistics (the
 * numpy default, which vLLM and SGLang also report), so numbers line up across tools.
 */

export interface Stats {
  count: number;
  mean: number;
  std: number;
  min: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
}

export const EMPTY_STATS: Stats = { count: 0, mean: 0, std: 0, min: 0, p50: 0, p90: 0, p95: 0, p99: 0, max: 0 };

/**
 * A metric the endpoint does not have (TTFT of embeddings, which stream no tokens). NaN keeps
 * the Stats type for every reader; JSON writes it as null, the tables print "n/a".
 */
export const NOT_APPLICABLE_STATS: Stats = { count: 0, mean: NaN, std: NaN, min: NaN, p50: NaN, p90: NaN, p95: NaN, p99: NaN, max: NaN };

export function isNotApplicable(s: Stats): boolean {
  return s.count === 0 && Number.isNaN(s.p50);
}

/** Percentile `p` in [0, 100] of an ascending array. */
export function percentileSorted(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return 0;
  const rank = (p / 100) * (n - 1);
  const lo = Math.floor(rank);
  const hi = Math.min(n - 1, lo + 1);
  const frac = rank - lo;
  return (sorted[lo] as number) + ((sorted[hi] as number) - (sorted[lo] as number)) * frac;
}

/** Summary of `values`; sorts a copy, never the input. */
export function summarize(values: ArrayLike<number>): Stats {
  const n = values.length;
  if (n === 0) return { ...EMPTY_STATS };
  const sorted = Float64Array.from(values).sort();
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i] as number;
  const mean = sum / n;
  let sq = 0;
  for (let i = 0; i < n; i++) sq += ((sorted[i] as number) - mean) ** 2;
  return {
    count: n,
    mean,
    std: Math.sqrt(sq / n),
    min: sorted[0] as number,
    p50: percentileSorted(sorted, 50),
    p90: percentileSorted(sorted, 90),
    p95: percentileSorted(sorted, 95),
    p99: percentileSorted(sorted, 99),
    max: sorted[n - 1] as number,
  };
}

/** Quantile grid used for CDFs in the JSON report and plots: 0, 0.5%, ..., 100%. */
export const CDF_QUANTILES: readonly number[] = Array.from({ length: 201 }, (_, i) => i / 200);

/** Values at CDF_QUANTILES; empty when there is no data. */
export function cdfPoints(values: ArrayLike<number>): number[] {
  if (values.length === 0) return [];
  const sorted = Float64Array.from(values).sort();
  return CDF_QUANTILES.map((q) => percentileSorted(sorted, q * 100));
}
