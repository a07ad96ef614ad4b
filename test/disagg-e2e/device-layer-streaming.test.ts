/**
 * Layer-wise streaming between device KV pools, over real processes: prefill and decode workers
 * on `--device simt` (the CUDA backend's kernels on the host; a pool exported as shared memory
 * that the peer maps, as CUDA IPC maps a GPU pool), frontend and workers with
 * --kv-layer-streaming, UCX tcp for the progress slot. The decode worker copies each hand-off
 * layer range by layer range over the mapping (kvCopyFromPeer with a layer range) into staging
 * blocks of its own pool while the prefill computes, then one device copy puts them in the
 * sequence's blocks (workers/disagg/device-kv-prefetch.ts).
 *   - greedy output equals the aggregated worker's on the same device;
 *   - the first copy was issued while the prefill had written fewer than all layers: the decode
 *     worker's own record of the prefill's progress counter (layersReadyAtFirstCopy), not timing;
 *   - kill -9 of the prefill mid-stream: the request completes (recompute), and the decode worker
 *     holds no staging, active blocks or transfers afterwards.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import { isUcxBuilt } from '../../workers/kv-transfer/index.js';
import { metricValue, pollUntil, scrape } from '../harness/http.js';
import { DisaggCluster, MODEL, completeTokens, logRecords, waitForRecords } from './cluster.js';

const LABELS = { model_name: MODEL };
const STREAMED = /"msg":"KV streamed layer by layer"/;
const ADOPTED = /"msg":"KV adopted from the layer stream"/;
const PREFETCH_STARTED = /"msg":"KV layer prefetch started"/;

describe.skipIf(!isNativeBuilt() || !isUcxBuilt())('layer-wise streaming between device pools (simt workers, shared-memory mapping)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      agg: 1,
      engine: 'native',
      // One chunk per prompt (the step budget holds the longest): the whole prompt streams. The
      // SIMT harness runs a 1500-token layer in a good fraction of a second, so a layer range
      // copied before the last layer is written shows in the progress counters. A prefetch waits
      // --kv-pull-timeout for its decode request: a SIMT prefill of 1500 tokens takes seconds.
      workerArgs: ['--device', 'simt', '--kv-layer-streaming', '--max-num-batched-tokens', '2048', '--num-gpu-blocks', '400', '--kv-release-timeout', '60', '--kv-pull-timeout', '30'],
      frontendArgs: ['--kv-layer-streaming', '--disagg-min-prefill-tokens', '32'],
      env: { UCX_TLS: 'tcp' },
    });
  }, 180_000);
  afterAll(async () => {
    await cluster?.close();
  });

  const ids = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 31 + salt * 7) % 500));
  const body = (prompt: number[]) => ({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });

  it('greedy tokens equal the aggregated worker; the copies began before the prefill wrote its last layer', async () => {
    const agg = cluster.byRole('agg')[0]!;
    const decode = cluster.byRole('decode')[0]!;
    const prompts = [ids(1500, 1), ids(70, 2)];
    for (const [i, p] of prompts.entries()) {
      const reference = await completeTokens(cluster.url, body(p), { 'x-worker-instance-id': agg.instanceId });
      const streamed = await completeTokens(cluster.url, body(p));
      expect(streamed.nvext?.disagg_path).toBe('disagg');
      expect(streamed.tokenIds, `prompt ${i}`).toEqual(reference.tokenIds);
      await waitForRecords(decode.proc, ADOPTED, i + 1, 60_000);
    }
    const streamed = logRecords(decode.proc, STREAMED);
    expect(streamed).toHaveLength(prompts.length);
    // The long prompt: the decode worker issued its first copy when the prefill's published
    // progress counter said fewer than all layers were written, and copied more than once.
    const long = streamed[0]!;
    const layers = long.numLayers as number;
    expect(layers).toBeGreaterThan(1);
    expect(long.layersReadyAtFirstCopy as number).toBeLessThan(layers);
    expect(long.copies as number).toBeGreaterThan(1);
    // Never ahead of the counter: each copy's range ended at or below the layers ready at its issue.
    expect((long.readyAtIssue as number[]).every((r) => r >= 1 && r <= layers)).toBe(true);

    const text = await scrape(decode.statusUrl);
    expect(metricValue(text, 'tandem_worker_kv_recompute_fallbacks_total', LABELS)).toBe(0);
    expect(metricValue(text, 'tandem_worker_kv_transfer_by_transport_total', { ...LABELS, transport: 'cuda-ipc', result: 'ok' })).toBe(prompts.length);
    expect(metricValue(text, 'tandem_worker_kv_stream_hidden_ratio_count', LABELS)).toBe(prompts.length);
    expect(metricValue(text, 'tandem_worker_kv_stream_staging_blocks', LABELS)).toBe(0);
    await cluster.waitForBaseline();
  }, 240_000);

  it('kill -9 of the prefill worker mid-stream: the request completes and the decode worker leaks no staging or blocks', async () => {
    const decode = cluster.byRole('decode')[0]!;
    const prefill = cluster.byRole('prefill')[0]!;
    const started = logRecords(decode.proc, PREFETCH_STARTED).length;
    const adopted = logRecords(decode.proc, ADOPTED).length;
    const request = completeTokens(cluster.url, body(ids(1500, 3)));
    await waitForRecords(decode.proc, PREFETCH_STARTED, started + 1, 60_000);
    await cluster.kill9(prefill);
    const res = await request;
    expect(res.status).toBe(200);
    expect(res.tokenIds).toHaveLength(8);
    expect(logRecords(decode.proc, ADOPTED)).toHaveLength(adopted);
    await pollUntil(
      'decode staging, blocks and transfers back to 0',
      async () => {
        const text = await scrape(decode.statusUrl);
        return (
          metricValue(text, 'tandem_worker_kv_stream_staging_blocks', LABELS) === 0 &&
          metricValue(text, 'tandem_worker_kv_active_blocks', LABELS) === 0 &&
          metricValue(text, 'tandem_worker_kv_transfers_inflight', LABELS) === 0
        );
      },
      20_000,
    );
  }, 180_000);
});
