/**
 * TokenHistogram (the inter-token latency metric) against prom-client's own Histogram: fed the
 * same observations, the two scrape to the same text, line for line.
 */
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { FrontendMetrics, TokenHistogram } from '../../frontend/metrics.js';

const NAME = 'tandem_frontend_inter_token_latency_seconds';
const HELP = 'Time between consecutive generated tokens';
const BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01];

function pair(): { ours: TokenHistogram; theirs: Histogram<'model'>; oursText: () => Promise<string>; theirsText: () => Promise<string> } {
  const a = new Registry();
  const b = new Registry();
  const ours = new TokenHistogram(NAME, HELP, BUCKETS, a);
  const theirs = new Histogram({ name: NAME, help: HELP, labelNames: ['model'], buckets: BUCKETS, registers: [b] });
  return { ours, theirs, oursText: () => a.metrics(), theirsText: () => b.metrics() };
}

describe('frontend: TokenHistogram', () => {
  it('scrapes exactly like a prom-client Histogram fed the same values, bounds inclusive', async () => {
    const { ours, theirs, oursText, theirsText } = pair();
    // On a bound (0.001 belongs to le=0.001), between bounds, above every bound, and zero.
    const values: Array<[string, number, number]> = [
      ['m1', 0.001, 3],
      ['m1', 0.0007, 1],
      ['m1', 0.5, 2],
      ['m2', 0, 1],
      ['m2', 0.004, 5],
    ];
    for (const [model, value, times] of values) {
      ours.labels(model).observeMany(value, times);
      for (let i = 0; i < times; i++) theirs.labels(model).observe(value);
    }
    const text = await oursText();
    expect(text).toBe(await theirsText());
    // Worked by hand for m1: 1 at 0.0007, 3 at 0.001, 2 above 0.01 → le=0.001 holds 4, +Inf 6.
    expect(text).toContain(`${NAME}_bucket{le="0.0005",model="m1"} 0\n`);
    expect(text).toContain(`${NAME}_bucket{le="0.001",model="m1"} 4\n`);
    expect(text).toContain(`${NAME}_bucket{le="+Inf",model="m1"} 6\n`);
    expect(text).toContain(`${NAME}_count{model="m1"} 6\n`);
    expect(text).toContain(`${NAME}_sum{model="m1"} ${0.001 * 3 + 0.0007 + 0.5 * 2}\n`);
  });

  it('ignores non-finite values and non-positive counts; reset zeroes every series', async () => {
    const { ours, oursText } = pair();
    const series = ours.labels('m');
    series.observeMany(Number.NaN, 1);
    series.observeMany(0.002, 0);
    series.observe(0.002);
    expect(await oursText()).toContain(`${NAME}_count{model="m"} 1\n`);
    ours.reset();
    expect(await oursText()).toContain(`${NAME}_count{model="m"} 0\n`);
  });

  it('FrontendMetrics registers it under the docs/design.md name with the model label', async () => {
    const registry = new Registry();
    const metrics = new FrontendMetrics(registry);
    metrics.forModel('tiny').itl.observeMany(0.0015, 4);
    const text = await registry.metrics();
    expect(text).toContain(`# TYPE ${NAME} histogram\n`);
    expect(text).toContain(`${NAME}_bucket{le="0.002",model="tiny"} 4\n`);
    expect(text).toContain(`${NAME}_bucket{le="0.001",model="tiny"} 0\n`);
  });
});
