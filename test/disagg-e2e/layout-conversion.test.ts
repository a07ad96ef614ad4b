/**
 * The frontend over real processes with a prefill worker at --block-size 32 and a decode worker
 * at 16 (native CPU engine, tiny model, UCX tcp), through the openai SDK: greedy output equals
 * the aggregated worker's while every hand-off is converted on the decode side; with the
 * prefill worker killed, requests fall back to aggregated serving with the same tokens and
 * nothing stays allocated.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, scrape } from '../harness/http.js';
import { DisaggCluster, MODEL } from './cluster.js';

const LABELS = { model_name: MODEL };

function prompt(n: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => 3 + ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % 500));
}

describe('disaggregated across block sizes (prefill 32, decode 16) behind the frontend', () => {
  let cluster: DisaggCluster;
  let client: OpenAI;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      agg: 1,
      engine: 'native',
      workerArgs: ['--max-num-batched-tokens', '64', '--num-gpu-blocks', '256'],
      frontendArgs: ['--disagg-min-prefill-tokens', '32'],
      env: { UCX_TLS: 'tcp' },
    });
    await Promise.all([cluster.addWorker('prefill', ['--block-size', '32']), cluster.addWorker('decode', ['--block-size', '16'])]);
    await cluster.waitForRoutable(2);
    client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  /** Greedy token ids and the nvext of one completion. */
  const complete = async (tokens: number[], headers: Record<string, string> = {}) => {
    const res = await client.completions.create(
      { model: MODEL, prompt: tokens, max_tokens: 16, temperature: 0, logprobs: 0, ...({ ignore_eos: true, return_tokens_as_token_ids: true } as object) },
      { headers },
    );
    const ids = (res.choices[0]!.logprobs!.tokens ?? []).map((t) => Number(t.slice('token_id:'.length)));
    return { ids, nvext: (res as unknown as { nvext?: { disagg_path: string } }).nvext };
  };

  it('greedy tokens equal aggregated; the decode worker converted every hand-off and recomputed none', async () => {
    const agg = cluster.byRole('agg')[0]!;
    const decode = cluster.byRole('decode')[0]!;
    const prompts = [prompt(37, 1), prompt(100, 2), prompt(64, 3), [...prompt(48, 4), ...prompt(33, 5)]];
    const reference = [];
    for (const p of prompts) reference.push(await complete(p, { 'x-worker-instance-id': agg.instanceId }));
    const got = await Promise.all(prompts.map((p) => complete(p)));
    got.forEach((g, i) => {
      expect(g.nvext?.disagg_path, `prompt ${i}`).toBe('disagg');
      expect(g.ids, `prompt ${i}`).toEqual(reference[i]!.ids);
      expect(g.ids).toHaveLength(16);
    });
    const metrics = await scrape(decode.statusUrl);
    expect(metricValue(metrics, 'tandem_worker_kv_layout_conversions_total', { ...LABELS, conversion: 'block_size', result: 'ok' })).toBe(prompts.length);
    expect(metricValue(metrics, 'tandem_worker_kv_transfer_by_transport_total', { ...LABELS, transport: 'ucx-host', result: 'ok' })).toBe(prompts.length);
    expect(metricValue(metrics, 'tandem_worker_kv_recompute_fallbacks_total', LABELS) ?? 0).toBe(0);
    expect(metricValue(metrics, 'tandem_worker_kv_transport_info', { ...LABELS, pool: 'host', transports: 'ucx-host' })).toBe(1);
    await cluster.waitForBaseline();
  });

  it('with the prefill worker killed, requests fall back to aggregated with the same tokens', async () => {
    const p = prompt(90, 6);
    const reference = await complete(p, { 'x-worker-instance-id': cluster.byRole('agg')[0]!.instanceId });
    await cluster.kill9(cluster.byRole('prefill')[0]!);
    // Until the card's lease expires the frontend may still try it: every answer is complete.
    const during = await complete(p);
    expect(during.ids).toEqual(reference.ids);
    await pollUntil('aggregated path', async () => (await complete(p)).nvext === undefined, 15_000, 250);
    expect((await complete(p)).ids).toEqual(reference.ids);
    expect(metricValue(await scrape(cluster.url), 'tandem_frontend_disagg_requests_total', { model: MODEL, path: 'agg_no_prefill_workers' })).toBeGreaterThanOrEqual(1);
    await cluster.waitForBaseline();
  });
});
