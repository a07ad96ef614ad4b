/**
 * The dashboard of a disaggregated stack (real `runtime frontend` + one prefill and one decode
 * mocker worker, KV over UCX tcp): snapshots show the prefill and decode pools, and a
 * disaggregated request's inspector record names both workers with prefill and hand-off
 * timings; the disaggregation panel counts it. Needs `npm run build`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DashboardSnapshot, RequestRecord } from '../../frontend/dashboard/snapshot.js';
import { DisaggCluster, MODEL } from '../disagg-e2e/cluster.js';
import { pollUntil } from '../harness/http.js';

const PROMPT = Array.from({ length: 120 }, (_, i) => `word${i}`).join(' ');

describe('dashboard on a disaggregated mocker stack', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      engine: 'mocker',
      workerArgs: ['--kv-bytes-per-token', '4096', '--num-gpu-blocks', '512'],
      frontendArgs: ['--disagg-min-prefill-tokens', '64'],
      env: { UCX_TLS: 'tcp' },
    });
  }, 120_000);
  afterAll(async () => {
    await cluster?.close();
  });

  it('shows prefill and decode pools, and the request path prefill → decode with timings', async () => {
    // The cluster waits for routable (decode) workers only; the prefill pool comes from the same
    // card feed as the dashboard, so wait until the dashboard sees the prefill worker ready.
    await pollUntil('the frontend sees the prefill worker', async () => {
      const s = (await (await fetch(`${cluster.url}/dashboard/api/snapshot`)).json()) as DashboardSnapshot;
      const pool = s.models.find((m) => m.name === MODEL)?.pools.find((p) => p.role === 'prefill');
      return pool?.workers.some((w) => w.state === 'ready') === true;
    }, 15_000);
    const res = await fetch(`${cluster.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 6, ignore_eos: true }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const id = res.headers.get('x-request-id')!;
    const prefill = res.headers.get('x-prefill-worker-id');
    const decode = res.headers.get('x-decode-worker-id');
    expect(prefill).toBe(cluster.byRole('prefill')[0]!.instanceId);
    expect(decode).toBe(cluster.byRole('decode')[0]!.instanceId);

    const record = (await (await fetch(`${cluster.url}/dashboard/api/requests/${id}`)).json()) as RequestRecord;
    expect(record.prefillWorker).toBe(prefill);
    expect(record.workers).toEqual([decode]);
    expect(record.timings.prefillMs).toBeGreaterThan(0);
    expect(record.timings.transferMs).toBeGreaterThanOrEqual(0);

    const snap = (await (await fetch(`${cluster.url}/dashboard/api/snapshot`)).json()) as DashboardSnapshot;
    const pools = snap.models.find((m) => m.name === MODEL)!.pools;
    expect(pools.map((p) => [p.role, p.workers.filter((w) => w.state === 'ready').length])).toEqual([
      ['prefill', 1],
      ['decode', 1],
    ]);
    expect(snap.disagg.disaggregatedTotal).toBeGreaterThanOrEqual(1);
    expect(snap.disagg.transferLatencyMs.p50).not.toBeNull();
  });
});
