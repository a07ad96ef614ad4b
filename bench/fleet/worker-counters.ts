/**
 * Per-worker counters a fleet bench reads from each worker's own `/metrics` before and after a
 * run (requests, prefix-cache queries and hits, generated tokens), so load spread and cache
 * reuse are what the workers saw, not what the client believes.
 */
import type { Fleet } from './fleet.js';

export interface WorkerCounters {
  requests: number;
  prefixQueries: number;
  prefixHits: number;
  generated: number;
}

export async function scrapeWorker(statusUrl: string): Promise<WorkerCounters> {
  const text = await (await fetch(`${statusUrl}/metrics`)).text();
  const sum = (name: string) => {
    let total = 0;
    for (const line of text.split('\n')) {
      if (!line.startsWith(name)) continue;
      const m = /^[^ {]+(?:\{[^}]*\})? (\S+)$/.exec(line);
      if (m && line.slice(name.length).match(/^[ {]/)) total += Number(m[1]);
    }
    return total;
  };
  return {
    requests: sum('tandem_worker_requests_total'),
    prefixQueries: sum('vllm:prefix_cache_queries'),
    prefixHits: sum('vllm:prefix_cache_hits'),
    generated: sum('tandem_worker_generated_tokens_total'),
  };
}

export async function snapshotWorkers(fleet: Fleet): Promise<WorkerCounters[]> {
  return Promise.all(fleet.workers.map((w) => scrapeWorker(w.statusUrl)));
}

/** busiest / least busy (Infinity when one did nothing). */
export function spreadOf(values: number[]): number {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return min > 0 ? max / min : Infinity;
}
