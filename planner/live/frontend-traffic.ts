/**
 * Traffic over the last interval from the frontend's Prometheus /metrics: each scrape's
 * cumulative histograms minus the previous scrape's. Requests = the ISL histogram's count (one
 * sample per generation request), means = Δsum ÷ Δcount; TTFT and ITL in ms.
 */
import { promSum } from '../../runtime/index.js';
import type { TrafficObservation } from '../policy/observation.js';

const SERIES = {
  isl: 'tandem_frontend_input_sequence_tokens',
  osl: 'tandem_frontend_output_sequence_tokens',
  ttft: 'tandem_frontend_time_to_first_token_seconds',
  itl: 'tandem_frontend_inter_token_latency_seconds',
} as const;
type Key = keyof typeof SERIES;
type Totals = Record<Key, { sum: number; count: number }>;

/** Cumulative sums and counts from one scrape. */
export function frontendTotals(text: string): Totals {
  const out = {} as Totals;
  for (const [k, name] of Object.entries(SERIES) as [Key, string][]) out[k] = { sum: promSum(text, `${name}_sum`) ?? 0, count: promSum(text, `${name}_count`) ?? 0 };
  return out;
}

/** The interval between two scrapes. A counter that went down (frontend restarted) counts from zero. */
export function trafficBetween(prev: Totals | undefined, now: Totals, intervalS: number): TrafficObservation {
  const d = (k: Key) => {
    const p = prev?.[k];
    const reset = p !== undefined && now[k].count < p.count;
    return p === undefined || reset ? now[k] : { sum: now[k].sum - p.sum, count: now[k].count - p.count };
  };
  const isl = d('isl');
  const osl = d('osl');
  const ttft = d('ttft');
  const itl = d('itl');
  const t: TrafficObservation = { requests: prev === undefined ? 0 : isl.count, intervalS };
  if (prev === undefined) return t;
  if (isl.count > 0) t.meanIsl = isl.sum / isl.count;
  if (osl.count > 0) t.meanOsl = osl.sum / osl.count;
  if (ttft.count > 0) t.ttftMs = (1000 * ttft.sum) / ttft.count;
  if (itl.count > 0) t.itlMs = (1000 * itl.sum) / itl.count;
  return t;
}

export class FrontendTraffic {
  private prev: Totals | undefined;
  private prevAtMs: number | undefined;

  constructor(private readonly metricsUrl: string) {}

  async observe(nowMs: number, fallbackIntervalS: number): Promise<TrafficObservation> {
    const res = await fetch(this.metricsUrl, { signal: AbortSignal.timeout(5000) });
    if (!res.ok) throw new Error(`GET ${this.metricsUrl}: HTTP ${res.status}`);
    const now = frontendTotals(await res.text());
    const intervalS = this.prevAtMs === undefined ? fallbackIntervalS : Math.max(0.001, (nowMs - this.prevAtMs) / 1000);
    const t = trafficBetween(this.prev, now, intervalS);
    this.prev = now;
    this.prevAtMs = nowMs;
    return t;
  }
}
