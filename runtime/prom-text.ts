/**
 * The one Prometheus text-format reader for shipped code (the planner scrapes the frontend's
 * /metrics with it). Enough of the format for our own exporters: `name{l="v",…} value` lines,
 * comments skipped; a metric with several label sets sums the ones that match.
 */

/** Sum of every sample of `name` whose labels include `labels`; undefined when none matched. */
export function promSum(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  let total: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const match = /^(?:\{([^}]*)\})? (\S+)/.exec(line.slice(name.length));
    if (!match) continue;
    if (Object.keys(labels).length > 0) {
      const have = new Map<string, string>();
      for (const pair of (match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)) have.set(pair[1]!, pair[2]!);
      if (Object.entries(labels).some(([k, v]) => have.get(k) !== v)) continue;
    }
    const v = Number(match[2]);
    if (Number.isFinite(v)) total = (total ?? 0) + v;
  }
  return total;
}
