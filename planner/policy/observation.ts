/**
 * What the planner sees at the end of each interval. A live observation source (the event
 * plane's `load_metrics` plus the frontend's `/metrics`) and the simulator both produce this
 * shape; the policy never asks where it came from.
 */
export const POOL_NAMES = ['agg', 'prefill', 'decode'] as const;
export type PoolName = (typeof POOL_NAMES)[number];

export function isPoolName(v: unknown): v is PoolName {
  return typeof v === 'string' && (POOL_NAMES as readonly string[]).includes(v);
}

/** Frontend-side traffic over the interval that just ended. */
export interface TrafficObservation {
  /** Requests that arrived in the interval. */
  requests: number;
  /** Length of the interval in seconds (rate = requests / intervalS). */
  intervalS: number;
  /** Mean prompt tokens of those requests; absent when there were none. */
  meanIsl?: number;
  /** Mean output tokens; absent when there were none. */
  meanOsl?: number;
  /** Mean measured TTFT (ms) of requests whose first token came in the interval. */
  ttftMs?: number;
  /** Mean measured inter-token latency (ms) of tokens streamed in the interval. */
  itlMs?: number;
}

/** One pool, summed or averaged over its workers' last `load_metrics`. */
export interface PoolObservation {
  /** Workers the pool has now, starting ones included (what the connector reports). */
  replicas: number;
  /** Of those, workers that are up and serving. */
  ready: number;
  /** Prompt tokens waiting to be prefilled, summed over the pool. */
  queuedPrefillTokens: number;
  /** Mean KV usage over the pool's ready workers and over the interval, 0..1 (an interval mean, like the ITL it is compared with). */
  kvUsage: number;
}

export interface Observation {
  /** The caller's clock (ms); the policy has none of its own. */
  nowMs: number;
  traffic: TrafficObservation;
  pools: Partial<Record<PoolName, PoolObservation>>;
}
