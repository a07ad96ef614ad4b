/**
 * Layer-wise streaming in serving, over real processes (frontend and workers with
 * --kv-layer-streaming, UCX tcp): the prefill worker announces each hand-off before its first
 * token, the decode worker's `kv_prefetch` copies layer ranges as the prefill's progress slot
 * shows them, and the decode request adopts them.
 *   - mocker (8 modelled layers, slowed down): the first copy is issued while fewer than all
 *     layers are written (the decode worker's own record), the hidden-share metric moves, the
 *     adopted bytes pass the stamp check; kill -9 of the prefill mid-stream still completes the
 *     request (recompute) and leaves no decode blocks or prefetches behind;
 *   - native CPU tiny model: greedy output with streaming equals the aggregated worker's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, scrape } from '../harness/http.js';
import { DisaggCluster, MODEL, completeTokens, logRecords, waitForRecords } from './cluster.js';

const LABELS = { model_name: MODEL };
const STREAMED = /"msg":"KV streamed layer by layer"/;
const ADOPTED = /"msg":"KV adopted from the layer stream"/;
const PREFETCH_STARTED = /"msg":"KV layer prefetch started"/;
const STREAM_FAILED = /"msg":"KV layer stream failed/;

describe('layer-wise streaming, mocker workers (8 layers, UCX tcp)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      engine: 'mocker',
      // 0.1: a 1k-token prefill step takes ~300 ms, ~40 ms per modelled layer.
      workerArgs: ['--kv-layer-streaming', '--speedup-ratio', '0.1', '--num-gpu-blocks', '512', '--kv-release-timeout', '5', '--kv-pull-timeout', '3'],
      frontendArgs: ['--kv-layer-streaming', '--disagg-min-prefill-tokens', '256'],
      env: { UCX_TLS: 'tcp' },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  const prompt = (salt: number) => Array.from({ length: 1024 }, (_, i) => 3 + ((i * 37 + salt) % 500));

  it('the decode worker copies the first layers while the prefill still computes the last, and adopts them', async () => {
    const decode = cluster.byRole('decode')[0]!;
    const res = await completeTokens(cluster.url, { prompt: prompt(1), max_tokens: 6, ignore_eos: true, seed: 5 });
    expect(res.status).toBe(200);
    expect(res.nvext?.disagg_path).toBe('disagg');
    expect(res.tokenIds).toHaveLength(6);

    await waitForRecords(decode.proc, ADOPTED, 1);
    const [streamed] = logRecords(decode.proc, STREAMED);
    expect(streamed).toBeDefined();
    // Recorded by the decode worker when it issued its first copy: fewer than all 8 layers
    // were written on the prefill side, so the copy started before the last layer was.
    expect(streamed!.numLayers).toBe(8);
    expect(streamed!.layersReadyAtFirstCopy as number).toBeLessThan(8);
    expect(streamed!.copies as number).toBeGreaterThan(1);
    expect(streamed!.hiddenMs as number).toBeGreaterThan(0);

    const text = await scrape(decode.statusUrl);
    expect(metricValue(text, 'tandem_worker_kv_stream_hidden_ratio_count', LABELS)).toBe(1);
    expect(metricValue(text, 'tandem_worker_kv_stream_hidden_ratio_sum', LABELS)).toBeGreaterThan(0);
    // The adopted blocks passed the stamp check: no recompute, no whole-block pull.
    expect(metricValue(text, 'tandem_worker_kv_recompute_fallbacks_total', LABELS)).toBe(0);
    // Transfer metrics count the layer copies and their bytes (1024 tokens × 1024 B), not the
    // progress-slot polls.
    expect(metricValue(text, 'tandem_worker_kv_transfer_bytes_total', LABELS)).toBe(1024 * 1024);
    expect(metricValue(text, 'tandem_worker_kv_transfer_seconds_count', LABELS)).toBe(streamed!.copies);
    await cluster.waitForBaseline();
  }, 60_000);

  it('kill -9 of the prefill worker mid-stream: the request completes (recompute) and no decode blocks or prefetch stay', async () => {
    const decode = cluster.byRole('decode')[0]!;
    const prefill = cluster.byRole('prefill')[0]!;
    const startedBefore = logRecords(decode.proc, PREFETCH_STARTED).length;
    const adoptedBefore = logRecords(decode.proc, ADOPTED).length;
    const request = completeTokens(cluster.url, { prompt: prompt(2), max_tokens: 6, ignore_eos: true, seed: 6 });
    await waitForRecords(decode.proc, PREFETCH_STARTED, startedBefore + 1);
    await cluster.kill9(prefill);
    const res = await request;
    expect(res.status).toBe(200);
    expect(res.tokenIds).toHaveLength(6);
    // The stream failed on the dead prefill's slot and freed its staging; nothing was adopted.
    await waitForRecords(decode.proc, STREAM_FAILED, 1);
    expect(logRecords(decode.proc, STREAM_FAILED).at(-1)!.open).toBe(0);
    expect(logRecords(decode.proc, ADOPTED)).toHaveLength(adoptedBefore);
    await pollUntil(
      'decode blocks back to 0',
      async () => metricValue(await scrape(decode.statusUrl), 'tandem_worker_kv_active_blocks', LABELS) === 0,
      10_000,
    );
    await cluster.waitForBaseline();
  }, 60_000);
});

describe('layer-wise streaming, native CPU tiny model (UCX tcp)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      agg: 1,
      engine: 'native',
      // A small step budget: the long prompt prefills in chunks, only its last chunk streams.
      workerArgs: ['--kv-layer-streaming', '--max-num-batched-tokens', '64', '--num-gpu-blocks', '512'],
      frontendArgs: ['--kv-layer-streaming', '--disagg-min-prefill-tokens', '32'],
      env: { UCX_TLS: 'tcp' },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('greedy tokens with streaming equal the aggregated worker, and every hand-off was adopted from the stream', async () => {
    const agg = cluster.byRole('agg')[0]!;
    const decode = cluster.byRole('decode')[0]!;
    const ids = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 31 + salt * 7) % 500));
    const prompts = [ids(90, 1), ids(300, 2), ids(40, 3)];
    const body = (prompt: number[]) => ({ prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
    for (const [i, p] of prompts.entries()) {
      const reference = await completeTokens(cluster.url, body(p), { 'x-worker-instance-id': agg.instanceId });
      const streamed = await completeTokens(cluster.url, body(p));
      expect(streamed.nvext?.disagg_path).toBe('disagg');
      expect(streamed.tokenIds, `prompt ${i}`).toEqual(reference.tokenIds);
      await waitForRecords(decode.proc, ADOPTED, i + 1);
    }
    expect(logRecords(decode.proc, STREAMED)).toHaveLength(prompts.length);
    expect(metricValue(await scrape(decode.statusUrl), 'tandem_worker_kv_recompute_fallbacks_total', LABELS)).toBe(0);
    await cluster.waitForBaseline();
  }, 120_000);
});
