/**
 * The kubernetes connector against a small in-test API server that speaks apps/v1: list
 * Deployments by label, and GET / PATCH `namespaces/{ns}/deployments/{name}/scale`. Asserts
 * what goes over the wire (verb, path, content type, body), typed errors on 404 / 409 / 5xx that
 * the live loop counts and retries next interval without crashing, and adoption of replicas
 * changed behind the planner's back.
 */
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { ConnectorError, defaultPlannerConfig, KubernetesConnector, Planner, PlannerLoop, PlannerMetrics, POOL_LABEL, type Decision, type Observation, type PlannerConfig } from '../../planner/index.js';
import { FakeApiServer, kubeConfigFor } from './fake-kube-api.js';

function loadConfig(): PlannerConfig {
  const c = defaultPlannerConfig();
  return { ...c, mode: 'load', intervalS: 1, cooldownUpS: 0, cooldownDownS: 0, scaleDownIntervals: 1, pools: { prefill: { min: 1, max: 8, gpusPerWorker: 1, allowZero: false }, decode: { min: 1, max: 8, gpusPerWorker: 1, allowZero: false } } };
}

/** Decode KV above the 0.9 threshold (+1 each interval); prefill within its band (keep). */
const hotDecode = { observe: async (): Promise<Observation> => ({ nowMs: Date.now(), traffic: { requests: 0, intervalS: 1 }, pools: { prefill: { replicas: 0, ready: 99, queuedPrefillTokens: 8192, kvUsage: 0.5 }, decode: { replicas: 0, ready: 99, queuedPrefillTokens: 0, kvUsage: 0.95 } } }) };

const decision = (over: Partial<Decision>): Decision => ({ pool: 'decode', atMs: 0, current: 2, desired: 3, target: 3, action: 'up', rule: 'load.up', limitedBy: [], reason: 'test', ...over });

describe('kubernetes connector (apps/v1 scale subresource)', () => {
  let api: FakeApiServer;
  let connector: KubernetesConnector;
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];

  beforeEach(async () => {
    api = new FakeApiServer();
    await api.start();
    api.deployments.set('tandem-prefill', { pool: 'prefill', replicas: 1 });
    api.deployments.set('tandem-decode', { pool: 'decode', replicas: 2 });
    logs.length = 0;
    connector = await KubernetesConnector.create({ namespace: 'serving', kubeConfig: kubeConfigFor(api.url), log: (msg, fields) => logs.push({ msg, fields }) });
  });
  afterEach(() => api.close());

  it('finds the Deployment by pool label, GETs and merge-PATCHes its scale subresource', async () => {
    expect(await connector.replicas('decode')).toBe(2);
    await connector.scale('decode', 3, decision({}));
    expect(api.requests).toEqual([
      { method: 'GET', path: '/apis/apps/v1/namespaces/serving/deployments' },
      { method: 'GET', path: '/apis/apps/v1/namespaces/serving/deployments/tandem-decode/scale' },
      { method: 'PATCH', path: '/apis/apps/v1/namespaces/serving/deployments/tandem-decode/scale', contentType: 'application/merge-patch+json', body: { spec: { replicas: 3 } } },
    ]);
    expect(api.deployments.get('tandem-decode')!.replicas).toBe(3);
    // the label selector it listed with
    expect(api.requests.length).toBe(3);
    expect(await connector.replicas('decode')).toBe(3);
    expect(connector.adopted).toBe(0); // its own change is not "someone else's"
  });

  it('404, 409 and 5xx become typed ConnectorErrors', async () => {
    const cases: [number, string][] = [
      [404, 'not_found'],
      [409, 'conflict'],
      [503, 'server'],
      [500, 'server'],
    ];
    await connector.replicas('decode');
    for (const [status, kind] of cases) {
      api.failNext = { method: 'PATCH', status };
      const err = await connector.scale('decode', 4, decision({ target: 4 })).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectorError);
      expect((err as ConnectorError).kind).toBe(kind);
      expect((err as ConnectorError).status).toBe(status);
      expect((err as ConnectorError).message).toContain(`HTTP ${status}`);
    }
    // a pool with no Deployment carrying its label
    api.deployments.delete('tandem-prefill');
    const missing = await connector.replicas('prefill').catch((e: unknown) => e);
    expect((missing as ConnectorError).kind).toBe('not_found');
    expect((missing as ConnectorError).message).toContain(`${POOL_LABEL}=prefill`);
  });

  it('the live loop counts connector errors, never throws, and retries the action next interval', async () => {
    const registry = new Registry();
    const metrics = new PlannerMetrics(registry);
    const loop = new PlannerLoop({ planner: new Planner(loadConfig(), new PolynomialPerfModel()), source: hotDecode, connector, metrics });
    for (const status of [409, 503, 404]) {
      api.failNext = { method: 'PATCH', status };
      const ds = await loop.tick();
      const d = ds.find((x) => x.pool === 'decode')!;
      expect(d).toMatchObject({ action: 'up', current: 2, target: 3 });
      expect(api.deployments.get('tandem-decode')!.replicas).toBe(2); // not applied
    }
    expect(loop.errors).toBe(3);
    const text = await registry.metrics();
    expect(text).toMatch(/tandem_planner_connector_errors_total\{pool="decode",kind="conflict"\} 1/);
    expect(text).toMatch(/tandem_planner_connector_errors_total\{pool="decode",kind="server"\} 1/);
    expect(text).toMatch(/tandem_planner_connector_errors_total\{pool="decode",kind="not_found"\} 1/);
    // the next interval retries and succeeds (the failures left no pending action behind)
    const ok = await loop.tick();
    expect(ok.find((x) => x.pool === 'decode')).toMatchObject({ action: 'up', current: 2, target: 3 });
    expect(api.deployments.get('tandem-decode')!.replicas).toBe(3);
    expect(loop.errors).toBe(3);
    expect(await registry.metrics()).toMatch(/tandem_planner_target_replicas\{pool="decode"\} 3/);
    // a failing read (5xx on GET) skips the interval, counted, no throw
    api.failNext = { method: 'GET', status: 502 };
    expect(await loop.tick()).toEqual([]);
    expect(loop.errors).toBe(4);
  });

  it('replicas changed behind its back are logged and adopted as current', async () => {
    const planner = new Planner({ ...loadConfig(), mode: 'load' }, new PolynomialPerfModel());
    const loop = new PlannerLoop({ planner, source: hotDecode, connector });
    await loop.tick(); // decode 2 → 3
    expect(api.deployments.get('tandem-decode')!.replicas).toBe(3);
    api.deployments.get('tandem-decode')!.replicas = 6; // kubectl scale --replicas 6
    const ds = await loop.tick();
    expect(ds.find((x) => x.pool === 'decode')).toMatchObject({ current: 6, target: 7, action: 'up' });
    expect(connector.adopted).toBe(1);
    expect(logs.find((l) => l.msg.includes('outside the planner'))?.fields).toMatchObject({ pool: 'decode', planner: 3, now: 6 });
    expect(api.deployments.get('tandem-decode')!.replicas).toBe(7); // planned from 6, not reverted to 3/4
  });
});
