/**
 * `tandem_frontend_*` metrics (docs/design.md "HTTP surface"). Per-model children are cached so the
 * per-token path does one map lookup per request, not per token. Inter-token latency is
 * observed for every token, so it is a TokenHistogram (typed-array buckets, one bucket search
 * per worker delta) rather than a prom-client Histogram (a label hash per observation).
 */
import { Counter, Gauge, Histogram, type Metric, type MetricValueWithName, type Registry } from 'prom-client';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const ITL_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const TOKEN_BUCKETS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072];
const RATIO_BUCKETS = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1];

export interface ModelMetrics {
  inflight: Gauge.Internal<'model'>;
  ttft: Histogram.Internal<'model'>;
  itl: HistogramSeries;
  duration: Histogram.Internal<'model'>;
  isl: Histogram.Internal<'model'>;
  osl: Histogram.Internal<'model'>;
  kvHitRate: Histogram.Internal<'model'>;
}

export class FrontendMetrics {
  readonly requests: Counter<'model' | 'endpoint' | 'status'>;
  readonly inflight: Gauge<'model'>;
  readonly ttft: Histogram<'model'>;
  readonly itl: TokenHistogram;
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
    this.itl = new TokenHistogram('tandem_frontend_inter_token_latency_seconds', 'Time between consecutive generated tokens', ITL_BUCKETS, registry);
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

/** One label set's buckets: non-cumulative counts, the last one for values above every bound. */
export class HistogramSeries {
  private readonly counts: Float64Array;
  private sum = 0;
  private count = 0;

  constructor(private readonly upperBounds: readonly number[]) {
    this.counts = new Float64Array(upperBounds.length + 1);
  }

  observe(value: number): void {
    this.observeMany(value, 1);
  }

  /** `times` observations of the same value (the tokens of one worker delta share a gap). */
  observeMany(value: number, times: number): void {
    if (!Number.isFinite(value) || times <= 0) return;
    const bounds = this.upperBounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]! += times;
    this.sum += value * times;
    this.count += times;
  }

  /** prom-client's value layout: cumulative `le` buckets, `+Inf`, `_sum`, `_count`. */
  export(name: string, label: string, labelValue: string, out: MetricValueWithName<string>[]): void {
    let cumulative = 0;
    for (let i = 0; i < this.upperBounds.length; i++) {
      cumulative += this.counts[i]!;
      out.push({ metricName: `${name}_bucket`, labels: { le: this.upperBounds[i]!, [label]: labelValue }, value: cumulative });
    }
    out.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', [label]: labelValue }, value: this.count });
    out.push({ metricName: `${name}_sum`, labels: { [label]: labelValue }, value: this.sum });
    out.push({ metricName: `${name}_count`, labels: { [label]: labelValue }, value: this.count });
  }

  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}

/** What Registry reads from a metric's get(). */
export interface ExportedHistogram {
  name: string;
  help: string;
  type: 'histogram';
  values: MetricValueWithName<string>[];
  aggregator: 'sum';
}

/**
 * A histogram with the one label `model`, registered as a custom prom-client metric; its
 * scrape output is line for line what a prom-client Histogram prints.
 */
export class TokenHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, HistogramSeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly upperBounds: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  labels(model: string): HistogramSeries {
    let series = this.series.get(model);
    if (!series) {
      series = new HistogramSeries(this.upperBounds);
      this.series.set(model, series);
    }
    return series;
  }

  async get(): Promise<ExportedHistogram> {
    const values: MetricValueWithName<string>[] = [];
    for (const [model, series] of this.series) series.export(this.name, 'model', model, values);
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    for (const series of this.series.values()) series.reset();
  }
}
