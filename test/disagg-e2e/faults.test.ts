/**
 * Faults over real processes (mocker engine with a real host KV pool of 128 KiB per token, so a
 * 1k-token prompt moves 128 MiB over UCX tcp): kill -9 of the prefill worker mid-transfer, kill
 * -9 of a decode worker mid-stream, the fallback to aggregated once the prefill pool is gone, and
 * --enforce-disagg. Gauges return to baseline after every test.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, readSse, scrape, tokenIdsOf } from '../harness/http.js';
import { DisaggCluster, MODEL, completeTokens } from './cluster.js';

const PROMPT = Array.from({ length: 1024 }, (_, i) => 3 + ((i * 37) % 500));
const LABELS = { model_name: MODEL };

describe('disaggregation faults (frontend + 2 prefill + 2 decode mocker workers)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 2,
      decode: 2,
      engine: 'mocker',
      workerArgs: ['--kv-bytes-per-token', '131072', '--num-gpu-blocks', '192', '--speedup-ratio', '1', '--kv-release-timeout', '5'],
      frontendArgs: ['--disagg-min-prefill-tokens', '256'],
      env: { UCX_TLS: 'tcp' },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  const request = { prompt: PROMPT, max_tokens: 40, ignore_eos: true, seed: 99 };

  it('kill -9 of the prefill worker right after its answer (mid-transfer): the request completes with the same tokens', async () => {
    const reference = await completeTokens(cluster.url, request);
    expect(reference.status).toBe(200);
    expect(reference.nvext?.disagg_path).toBe('disagg');
    await cluster.waitForBaseline();

    const res = await fetch(`${cluster.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, ...request, stream: true, logprobs: 0, return_tokens_as_token_ids: true }),
    });
    expect(res.status).toBe(200);
    const victim = cluster.worker(res.headers.get('x-prefill-worker-id')!);
    const decode = cluster.worker(res.headers.get('x-decode-worker-id')!);
    const before = await scrape(decode.statusUrl);
    let killed = false;
    const { chunks, done } = await readSse(res, async (chunk) => {
      // The first token is the prefill's answer: the decode worker is pulling now.
      if (!killed && tokenIdsOf([chunk]).length > 0) {
        killed = true;
        await cluster.kill9(victim);
      }
    });
    expect(killed).toBe(true);
    expect(done).toBe(true);
    expect(tokenIdsOf(chunks)).toEqual(reference.tokenIds);
    const after = await scrape(decode.statusUrl);
    // Either the pull failed and the decode worker recomputed, or it had just finished: never both, never neither.
    const fallbacks = (metricValue(after, 'tandem_worker_kv_recompute_fallbacks_total', LABELS) ?? 0) - (metricValue(before, 'tandem_worker_kv_recompute_fallbacks_total', LABELS) ?? 0);
    const bytes = (metricValue(after, 'tandem_worker_kv_transfer_bytes_total', LABELS) ?? 0) - (metricValue(before, 'tandem_worker_kv_transfer_bytes_total', LABELS) ?? 0);
    expect(fallbacks + (bytes > 0 ? 1 : 0)).toBe(1);
    await cluster.waitForBaseline();

    // The next requests avoid the dead prefill worker (health cooldown, then lease expiry).
    const next = await completeTokens(cluster.url, { ...request, seed: 100 });
    expect(next.status).toBe(200);
    expect(next.tokenIds).toHaveLength(40);
    await cluster.waitForBaseline();
  });

  it('kill -9 of the decode worker mid-stream: the stream migrates with prompt + tokens so far', async () => {
    const reference = await completeTokens(cluster.url, { ...request, seed: 7, max_tokens: 120 });
    expect(reference.tokenIds).toHaveLength(120);
    const res = await fetch(`${cluster.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, ...request, seed: 7, max_tokens: 120, stream: true, logprobs: 0, return_tokens_as_token_ids: true }),
    });
    const victim = cluster.worker(res.headers.get('x-decode-worker-id')!);
    let seen = 0;
    let killed = false;
    const { chunks, done } = await readSse(res, async (chunk) => {
      seen += tokenIdsOf([chunk]).length;
      if (!killed && seen >= 20) {
        killed = true;
        await cluster.kill9(victim);
      }
    });
    expect(killed).toBe(true);
    expect(done).toBe(true);
    expect(tokenIdsOf(chunks)).toEqual(reference.tokenIds);
    await cluster.waitForBaseline();
  });

  it('with the prefill pool gone requests run aggregated on the decode pool; --enforce-disagg answers 503', async () => {
    for (const w of cluster.live().filter((x) => x.role === 'prefill')) await cluster.kill9(w);
    // Cards expire with the 2 s lease; until then requests still complete (re-prefill or fallback).
    const during = await completeTokens(cluster.url, { ...request, seed: 3 });
    expect(during.status).toBe(200);
    expect(during.tokenIds).toHaveLength(40);
    await pollUntil('aggregated path', async () => {
      const r = await completeTokens(cluster.url, { ...request, seed: 3 });
      return r.status === 200 && r.nvext === undefined;
    }, 15_000, 500);
    const agg = await completeTokens(cluster.url, { ...request, seed: 3 });
    expect(agg.tokenIds).toEqual(during.tokenIds);
    expect(metricValue(await scrape(cluster.url), 'tandem_frontend_disagg_requests_total', { model: MODEL, path: 'agg_no_prefill_workers' })).toBeGreaterThanOrEqual(1);

    const enforced = await cluster.startFrontend(['--disagg-min-prefill-tokens', '256', '--enforce-disagg']);
    const url = (await enforced.waitForLine(/^frontend listening on /)).slice('frontend listening on '.length).trim();
    await cluster.waitForRoutable(cluster.live().filter((w) => w.role === 'decode').length, { url });
    const refused = await completeTokens(url, request);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect((JSON.parse(refused.body) as { error: { code: string } }).error.code).toBe('no_instances');
    // A short prompt never needed a prefill worker.
    expect((await completeTokens(url, { prompt: PROMPT.slice(0, 64), max_tokens: 4 })).status).toBe(200);
    await cluster.waitForBaseline();
  });
});
