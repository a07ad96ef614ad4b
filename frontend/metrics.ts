/**
 * `tandem_frontend_*` metrics (DESIGN.md "HTTP surface"). Per-model children are cached so the
 * per-token path does one map lookup per request, not per token.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const ITL_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const TOKEN_BUCKETS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072];
const RATIO_BUCKETS = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1];

export interface ModelMetrics {
  inflight: Gauge.Internal<'model'>;
  ttft: Histogram.Internal<'model'>;
  itl: Histogram.Internal<'model'>;
  duration: Histogram.Internal<'model'>;
  isl: Histogram.Internal<'model'>;
  osl: Histogram.Internal<'model'>;
  kvHitRate: Histogram.Internal<'model'>;
}

export class FrontendMetrics {
  readonly requests: Counter<'model' | 'endpoint' | 'status'>;
  readonly inflight: Gauge<'model'>;
  readonly ttft: Histogram<'model'>;
  readonly itl: Histogram<'model'>;
  readonly duration: Histogram<'model'>;
  readonly isl: Histogram<'model'>;
  readonly osl: Histogram<'model'>;
  readonly kvHitRate: Histogram<'model'>;
  readonly migrations: Counter<'model'>;
  readonly rejected: Counter<'reason'>;
  private readonly perModel = new Map<string, ModelMetrics>();

  constructor(readonly registry: Registry) {
    const registers = [registry];
    this.requests = new Counter({
      name: 'tandem_frontend_requests_total',
      help: 'HTTP requests by model, endpoint and status code',
      labelNames: ['model', 'endpoint', 'status'],
      registers,
    });
    this.inflight = new Gauge({ name: 'tandem_frontend_inflight_requests', help: 'Generation requests in flight', labelNames: ['model'], registers });
    this.ttft = new Histogram({ name: 'tandem_frontend_time_to_first_token_seconds', help: 'Time from request arrival to the first generated token', labelNames: ['model'], buckets: LATENCY_BUCKETS, registers });
    this.itl = new Histogram({ name: 'tandem_frontend_inter_token_latency_seconds', help: 'Time between consecutive generated tokens', labelNames: ['model'], buckets: ITL_BUCKETS, registers });
    this.duration = new Histogram({ name: 'tandem_frontend_request_duration_seconds', help: 'Time from request arrival to the last byte', labelNames: ['model'], buckets: DURATION_BUCKETS, registers });
    this.isl = new Histogram({ name: 'tandem_frontend_input_sequence_tokens', help: 'Prompt tokens per request', labelNames: ['model'], buckets: TOKEN_BUCKETS, registers });
    this.osl = new Histogram({ name: 'tandem_frontend_output_sequence_tokens', help: 'Generated tokens per request', labelNames: ['model'], buckets: TOKEN_BUCKETS, registers });
    this.kvHitRate = new Histogram({ name: 'tandem_frontend_kv_hit_rate', help: 'Fraction of prompt tokens served from the prefix cache', labelNames: ['model'], buckets: RATIO_BUCKETS, registers });
    this.migrations = new Counter({ name: 'tandem_frontend_migrations_total', help: 'Streams moved to another worker after a worker failure', labelNames: ['model'], registers });
    this.rejected = new Counter({ name: 'tandem_frontend_rejected_requests_total', help: 'Requests refused before routing (overload)', labelNames: ['reason'], registers });
  }

  forModel(model: string): ModelMetrics {
    let m = this.perModel.get(model);
    if (!m) {
      m = {
        inflight: this.inflight.labels(model),
        ttft: this.ttft.labels(model),
        itl: this.itl.labels(model),
        duration: this.duration.labels(model),
        isl: this.isl.labels(model),
        osl: this.osl.labels(model),
        kvHitRate: this.kvHitRate.labels(model),
      };
      // Bound the cache: model names come from discovery, but a client can send any name.
      if (this.perModel.size < 1024) this.perModel.set(model, m);
    }
    return m;
  }
}
