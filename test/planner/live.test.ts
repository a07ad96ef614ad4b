/**
 * The live planner's pieces in-process: `tandem_planner_*` metrics from decisions, traffic from
 * two frontend scrapes (worked numbers), and the local connector's bookkeeping (newest stopped
 * first, draining ones no longer counted, `drained()` waits for their exit).
 */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { frontendTotals, LocalConnector, PlannerMetrics, trafficBetween, type Decision, type LocalWorker } from '../../planner/index.js';
import { promSum } from '../../runtime/index.js';

const decision = (over: Partial<Decision>): Decision => ({ pool: 'decode', atMs: 0, current: 2, desired: 3, target: 3, action: 'up', rule: 'sla.decode', limitedBy: [], reason: 'r', ...over });

describe('tandem_planner_* metrics', () => {
  it('are set from each decision', async () => {
    const registry = new Registry();
    const m = new PlannerMetrics(registry);
    m.record(decision({ prediction: { rate: 12.5, isl: 3000, osl: 300, plannedRate: 14, surge: 0.25 }, corrections: { ttft: 1.2, itl: 0.9 } }));
    m.record(decision({ pool: 'prefill', current: 4, desired: 2, target: 4, action: 'hold', rule: 'sla.prefill', limitedBy: ['hysteresis'] }));
    m.connectorError('decode', 'server');
    const text = await registry.metrics();
    const v = (name: string, labels: Record<string, string> = {}) => promSum(text, name, labels);
    expect(v('tandem_planner_predicted_request_rate')).toBe(12.5);
    expect(v('tandem_planner_predicted_isl_tokens')).toBe(3000);
    expect(v('tandem_planner_predicted_osl_tokens')).toBe(300);
    expect(v('tandem_planner_surge_ratio')).toBe(0.25);
    expect(v('tandem_planner_current_replicas', { pool: 'decode' })).toBe(2);
    expect(v('tandem_planner_desired_replicas', { pool: 'prefill' })).toBe(2);
    expect(v('tandem_planner_target_replicas', { pool: 'prefill' })).toBe(4);
    expect(v('tandem_planner_decisions_total', { pool: 'decode', action: 'up', rule: 'sla.decode' })).toBe(1);
    expect(v('tandem_planner_decisions_total', { action: 'hold' })).toBe(1);
    expect(v('tandem_planner_correction_factor', { kind: 'ttft' })).toBe(1.2);
    expect(v('tandem_planner_correction_factor', { kind: 'itl' })).toBe(0.9);
    expect(v('tandem_planner_connector_errors_total', { pool: 'decode', kind: 'server' })).toBe(1);
  });
});

describe('traffic from the frontend /metrics', () => {
  const scrape = (n: number, islSum: number, oslSum: number, ttftSum: number, itlN: number, itlSum: number) =>
    [
      '# HELP tandem_frontend_input_sequence_tokens Prompt tokens per request',
      `tandem_frontend_input_sequence_tokens_sum{model="a"} ${islSum}`,
      `tandem_frontend_input_sequence_tokens_count{model="a"} ${n}`,
      `tandem_frontend_output_sequence_tokens_sum{model="a"} ${oslSum}`,
      `tandem_frontend_output_sequence_tokens_count{model="a"} ${n}`,
      `tandem_frontend_time_to_first_token_seconds_sum{model="a"} ${ttftSum}`,
      `tandem_frontend_time_to_first_token_seconds_count{model="a"} ${n}`,
      `tandem_frontend_inter_token_latency_seconds_sum{model="a"} ${itlSum}`,
      `tandem_frontend_inter_token_latency_seconds_count{model="a"} ${itlN}`,
    ].join('\n');

  it('deltas between two scrapes: 30 requests in 10 s, ISL 200, OSL 50, TTFT 120 ms, ITL 20 ms', () => {
    const a = frontendTotals(scrape(10, 1000, 500, 1, 100, 2));
    const b = frontendTotals(scrape(40, 7000, 2000, 4.6, 1600, 32));
    // (7000−1000)/30 = 200; (2000−500)/30 = 50; (4.6−1)/30 = 0.12 s; (32−2)/1500 = 0.02 s
    const t = trafficBetween(a, b, 10);
    expect(t.requests).toBe(30);
    expect(t.intervalS).toBe(10);
    expect(t.meanIsl).toBeCloseTo(200, 9);
    expect(t.meanOsl).toBeCloseTo(50, 9);
    expect(t.ttftMs).toBeCloseTo(120, 9);
    expect(t.itlMs).toBeCloseTo(20, 9);
  });

  it('the first scrape is a baseline (no traffic); a restarted frontend counts from zero', () => {
    const b = frontendTotals(scrape(40, 7000, 2000, 4.6, 1600, 32));
    expect(trafficBetween(undefined, b, 5)).toEqual({ requests: 0, intervalS: 5 });
    const after = frontendTotals(scrape(4, 800, 200, 0.4, 100, 2));
    expect(trafficBetween(b, after, 5)).toMatchObject({ requests: 4, meanIsl: 200 });
  });
});

describe('local connector', () => {
  it('starts named workers up to the target and drains the newest first', async () => {
    const exits: Array<() => void> = [];
    const stopped: string[] = [];
    const launch = (_pool: string, name: string): LocalWorker => ({
      name,
      stop: () => {
        stopped.push(name);
        return new Promise<void>((r) => exits.push(r));
      },
    });
    const c = new LocalConnector(launch, { agg: [{ name: 'agg-0', stop: async () => undefined }] });
    expect(await c.replicas('agg')).toBe(1);
    await c.scale('agg', 3, decision({ pool: 'agg', current: 1, target: 3 }));
    expect(c.workers('agg')).toEqual(['agg-0', 'agg-1', 'agg-2']);
    await c.scale('agg', 1, decision({ pool: 'agg', current: 3, target: 1, action: 'down' }));
    expect(stopped).toEqual(['agg-2', 'agg-1']);
    expect(await c.replicas('agg')).toBe(1); // draining workers no longer count
    let drained = false;
    const waiting = c.drained().then(() => (drained = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(drained).toBe(false); // still draining
    exits.forEach((exit) => exit());
    await waiting;
    await c.scale('agg', 2, decision({ pool: 'agg', current: 1, target: 2 }));
    expect(c.workers('agg')).toEqual(['agg-0', 'agg-3']); // names are never reused
  });
});
