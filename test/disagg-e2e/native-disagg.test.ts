/**
 * The invariant over real processes with the native CPU engine and the tiny model: greedy
 * output disaggregated (frontend → prefill worker → UCX pull → decode worker) equals the same
 * requests run aggregated, token for token — for prompts sharing a prefix (prefix hits on the
 * prefill side), prompts longer than the step budget (chunked prefill), all in flight at once —
 * over UCX tcp and over shared memory. After every test the block, pin and in-flight gauges are
 * back to baseline.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, scrape } from '../harness/http.js';
import { DisaggCluster, MODEL, completeTokens } from './cluster.js';

function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
}

/** Token-id prompts: 3 share a 160-token prefix, 2 are longer than the 64-token step budget. */
function promptSet(): number[][] {
  const next = prng(7);
  const ids = (n: number) => Array.from({ length: n }, () => 3 + (next() % 500));
  const prefix = ids(160);
  return [prefix.concat(ids(40)), prefix.concat(ids(48)), prefix.concat(ids(33)), ids(300), ids(257), ids(90)];
}

const TRANSPORTS = [
  { name: 'tcp', tls: 'tcp' },
  { name: 'shared memory', tls: 'sm,self' },
];

describe.each(TRANSPORTS)('disaggregated == aggregated, native CPU engine, UCX $name', ({ tls }) => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      agg: 1,
      engine: 'native',
      // A small step budget so the long prompts prefill in several chunks on every worker.
      workerArgs: ['--max-num-batched-tokens', '64', '--num-gpu-blocks', '512'],
      frontendArgs: ['--disagg-min-prefill-tokens', '32'],
      env: { UCX_TLS: tls },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('greedy tokens match for prefix hits, chunked prefill and concurrent requests', async () => {
    const prompts = promptSet();
    const agg = cluster.byRole('agg')[0]!;
    const prefill = cluster.byRole('prefill')[0]!;
    const decode = cluster.byRole('decode')[0]!;
    const body = (prompt: number[]) => ({ prompt, max_tokens: 24, temperature: 0, ignore_eos: true });

    // Reference: pinned to the aggregated worker (a pinned agg worker never disaggregates).
    const reference = [];
    for (const p of prompts) reference.push(await completeTokens(cluster.url, body(p), { 'x-worker-instance-id': agg.instanceId }));
    for (const r of reference) {
      expect(r.status).toBe(200);
      expect(r.tokenIds).toHaveLength(24);
      expect(r.nvext).toBeUndefined();
    }

    // Warm the shared prefix on the prefill worker, then everything at once.
    const warm = await completeTokens(cluster.url, body(prompts[0]!));
    expect(warm.tokenIds).toEqual(reference[0]!.tokenIds);
    const results = await Promise.all(prompts.map((p) => completeTokens(cluster.url, body(p))));
    for (let i = 0; i < prompts.length; i++) {
      const r = results[i]!;
      expect(r.status, r.body).toBe(200);
      expect(r.nvext).toEqual({ prefill_worker_id: prefill.instanceId, decode_worker_id: decode.instanceId, disagg_path: 'disagg' });
      expect(r.tokenIds, `prompt ${i}`).toEqual(reference[i]!.tokenIds);
    }
    // The prefix hit happened on the prefill side: 160 shared tokens = 10 full blocks.
    expect(results[1]!.cachedTokens).toBeGreaterThanOrEqual(144);

    // The KV really moved over UCX (no silent recompute).
    const decodeMetrics = await scrape(decode.statusUrl);
    expect(metricValue(decodeMetrics, 'tandem_worker_kv_transfer_bytes_total', { model_name: MODEL })).toBeGreaterThan(0);
    expect(metricValue(decodeMetrics, 'tandem_worker_kv_recompute_fallbacks_total', { model_name: MODEL }) ?? 0).toBe(0);
    await cluster.waitForBaseline();
  });

  it('streaming: the first token comes from the prefill worker and the stream equals aggregated output', async () => {
    const prompt = promptSet()[3]!;
    const agg = cluster.byRole('agg')[0]!;
    const req = { model: MODEL, prompt, max_tokens: 16, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true };
    const reference = await completeTokens(cluster.url, req, { 'x-worker-instance-id': agg.instanceId });
    const res = await fetch(`${cluster.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...req, stream: true }) });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-prefill-worker-id')).toBe(cluster.byRole('prefill')[0]!.instanceId);
    expect(res.headers.get('x-decode-worker-id')).toBe(cluster.byRole('decode')[0]!.instanceId);
    const text = await res.text();
    const ids: number[] = [];
    for (const frame of text.split('\n\n')) {
      if (!frame.startsWith('data: {')) continue;
      const chunk = JSON.parse(frame.slice(6)) as { choices: Array<{ logprobs?: { tokens?: string[] } }> };
      for (const t of chunk.choices[0]?.logprobs?.tokens ?? []) ids.push(Number(t.slice('token_id:'.length)));
    }
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(ids).toEqual(reference.tokenIds);
    await cluster.waitForBaseline();
  });
});
