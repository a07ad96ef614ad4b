/**
 * Disaggregation with speculative decoding (issue 37): decode workers speculate. Real processes,
 * native CPU engine, the tiny model, every worker started with `--speculative ngram`: greedy
 * output disaggregated (prefill worker → UCX pull → speculating decode worker) equals the same
 * requests on an aggregated worker, token for token; the decode worker verified drafts and
 * accepted some (its vLLM-named counters), the prefill worker none (it returns one token).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, scrape } from '../harness/http.js';
import { DisaggCluster, completeTokens } from './cluster.js';

describe('disaggregated == aggregated with speculative decoding (native CPU, UCX tcp)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 1,
      decode: 1,
      agg: 1,
      engine: 'native',
      workerArgs: ['--num-gpu-blocks', '512', '--speculative', 'ngram', '--prompt-lookup-min', '1', '--num-speculative-tokens', '4'],
      frontendArgs: ['--disagg-min-prefill-tokens', '32'],
      env: { UCX_TLS: 'tcp' },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('greedy tokens match, and the decode worker speculated', async () => {
    // Repetitive prompts: the n-gram lookup finds drafts in them, and greedy decoding of the random model cycles.
    const prompts = [0, 1, 2].map((k) => Array.from({ length: 96 }, (_, i) => 3 + ((i * 7 + k * 11) % 40)));
    const body = (prompt: number[]) => ({ prompt, max_tokens: 48, temperature: 0, ignore_eos: true });
    const agg = cluster.byRole('agg')[0]!;
    const decode = cluster.byRole('decode')[0]!;
    const prefill = cluster.byRole('prefill')[0]!;
    const reference = [];
    for (const p of prompts) reference.push(await completeTokens(cluster.url, body(p), { 'x-worker-instance-id': agg.instanceId }));
    const results = await Promise.all(prompts.map((p) => completeTokens(cluster.url, body(p))));
    for (let i = 0; i < prompts.length; i++) {
      expect(results[i]!.status, results[i]!.body).toBe(200);
      expect(results[i]!.nvext).toEqual({ prefill_worker_id: prefill.instanceId, decode_worker_id: decode.instanceId, disagg_path: 'disagg' });
      expect(results[i]!.tokenIds, `prompt ${i}`).toEqual(reference[i]!.tokenIds);
    }
    const decodeMetrics = await scrape(decode.statusUrl);
    expect(metricValue(decodeMetrics, 'vllm:spec_decode_num_drafts_total')).toBeGreaterThan(0);
    expect(metricValue(decodeMetrics, 'vllm:spec_decode_num_accepted_tokens_total')).toBeGreaterThan(0);
    const prefillMetrics = await scrape(prefill.statusUrl);
    expect(prefillMetrics).not.toContain('vllm:spec_decode_num_drafts_total');
  }, 120_000);
});
