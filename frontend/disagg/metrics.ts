/**
 * `tandem_frontend_disagg_*` metrics: how requests were routed (and why not disaggregated), how
 * long prefills took, and the frontend's own kv_release calls. Labels are bounded: model names
 * come from discovery, the path from a fixed list.
 */
import { Counter, Histogram, type Registry } from 'prom-client';

export const DISAGG_PATHS = ['disagg', 'agg_short_prompt', 'agg_no_prefill_workers', 'agg_no_decode_workers', 'fallback_prefill_failed', 'rejected'] as const;
export type DisaggPath = (typeof DISAGG_PATHS)[number];

const PREFILL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class DisaggMetrics {
  readonly routed: Counter<'model' | 'path'>;
  readonly prefillSeconds: Histogram<'model'>;
  readonly prefillFailures: Counter<'model'>;
  readonly releases: Counter<'model'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.routed = new Counter({ name: 'tandem_frontend_disagg_requests_total', help: 'Generation requests by disaggregation path', labelNames: ['model', 'path'], registers });
    this.prefillSeconds = new Histogram({ name: 'tandem_frontend_disagg_prefill_seconds', help: 'Remote prefill time: call to first token and KV hand-off', labelNames: ['model'], buckets: PREFILL_BUCKETS, registers });
    this.prefillFailures = new Counter({ name: 'tandem_frontend_disagg_prefill_failures_total', help: 'Prefill attempts that failed and were retried elsewhere or fell back', labelNames: ['model'], registers });
    this.releases = new Counter({ name: 'tandem_frontend_disagg_kv_releases_total', help: 'kv_release calls the frontend made itself (decode never took the hand-off)', labelNames: ['model'], registers });
  }
}
