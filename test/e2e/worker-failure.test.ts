/**
 * End to end over real processes (built CLI): a frontend and two mocker workers with file
 * discovery. A client that disconnects frees the worker's KV blocks; a worker killed with
 * SIGKILL mid-stream costs the client nothing — the stream migrates and the answer has exactly
 * the requested tokens, the same ones an undisturbed run produces.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, readSse, scrape, tokenIdsOf } from '../harness/http.js';
import { E2eCluster, MODEL } from './cluster.js';

const LABELS = { model_name: MODEL };

describe('e2e: worker failure and client disconnect (frontend + 2 mocker workers)', () => {
  let cluster: E2eCluster;

  beforeAll(async () => {
    // Speedup 1: decode steps take ~6 ms, so a long stream is still running when we act on it.
    cluster = await E2eCluster.start({ workers: 2, workerArgs: ['--speedup-ratio', '1', '--num-gpu-blocks', '1024'] });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  const post = (path: string, body: unknown, signal?: AbortSignal) =>
    fetch(`${cluster.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });

  it('a client disconnect mid-stream cancels the worker stream and frees its blocks', async () => {
    const abort = new AbortController();
    const res = await post('/v1/completions', { model: MODEL, prompt: 'A long story about the sea. '.repeat(8), max_tokens: 1500, ignore_eos: true, stream: true }, abort.signal);
    expect(res.status).toBe(200);
    const serving = cluster.worker(res.headers.get('x-worker-instance-id')!);
    const reader = res.body!.getReader();
    let bytes = 0;
    while (bytes < 2000) bytes += (await reader.read()).value!.length;

    const busy = await scrape(serving.statusUrl);
    expect(metricValue(busy, 'tandem_worker_kv_active_blocks', LABELS)).toBeGreaterThan(0);
    expect(metricValue(busy, 'vllm:num_requests_running', LABELS)).toBe(1);

    abort.abort();
    await reader.cancel().catch(() => undefined);
    const abortedAt = Date.now();
    await pollUntil('worker blocks freed', async () => {
      const text = await scrape(serving.statusUrl);
      return metricValue(text, 'tandem_worker_kv_active_blocks', LABELS) === 0 && metricValue(text, 'vllm:num_requests_running', LABELS) === 0;
    }, 5000);
    const freedAfterMs = Date.now() - abortedAt;

    // The worker really stopped generating (not just a stale gauge): its token counter stands
    // still, far short of the 1500 asked for.
    const tokensNow = metricValue(await scrape(serving.statusUrl), 'tandem_worker_generated_tokens_total', LABELS)!;
    await new Promise((r) => setTimeout(r, 300));
    const tokensLater = metricValue(await scrape(serving.statusUrl), 'tandem_worker_generated_tokens_total', LABELS)!;
    expect(tokensLater).toBe(tokensNow);
    expect(tokensLater).toBeLessThan(1500);
    expect(metricValue(await scrape(serving.statusUrl), 'vllm:kv_cache_usage_perc', LABELS)).toBe(0);

    await pollUntil('frontend in-flight back to 0', async () => metricValue(await cluster.frontendMetrics(), 'tandem_frontend_inflight_requests', { model: MODEL }) === 0, 5000);
    expect(metricValue(await cluster.frontendMetrics(), 'tandem_frontend_requests_total', { model: MODEL, status: '499' })).toBe(1);
    expect(freedAfterMs).toBeLessThan(5000);
  });

  it('kill -9 of the worker serving a stream: the client still gets exactly max_tokens, the same tokens', async () => {
    // ~6 ms per token at speedup 1: ~3 s of stream, so the kill lands mid-stream even on busy cores.
    const MAX_TOKENS = 500;
    const request = { model: MODEL, prompt: 'Once upon a time', max_tokens: MAX_TOKENS, ignore_eos: true, seed: 4242, logprobs: 1, return_tokens_as_token_ids: true };

    // The undisturbed answer, for comparison: the mocker's tokens depend on (seed, position) only.
    const reference = (await (await post('/v1/completions', request)).json()) as { choices: Array<{ logprobs: { tokens: string[] } }> };
    const expected = tokenIdsOf([reference as unknown as Record<string, unknown>]);
    expect(expected).toHaveLength(MAX_TOKENS);

    const res = await post('/v1/completions', { ...request, stream: true, stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    const victim = cluster.worker(res.headers.get('x-worker-instance-id')!);
    const survivor = cluster.workers.find((w) => w !== victim && w.proc.running)!;
    let tokensAtKill = -1;
    let seen = 0;
    let victimRunning: number | undefined;
    const { chunks, done } = await readSse(res, async (chunk) => {
      seen += tokenIdsOf([chunk]).length;
      if (tokensAtKill < 0 && seen >= 20) {
        tokensAtKill = seen;
        victimRunning = metricValue(await scrape(victim.statusUrl), 'vllm:num_requests_running', LABELS);
        victim.proc.kill('SIGKILL');
      }
    });
    // The victim was still generating this stream when it died.
    expect(victimRunning).toBe(1);
    expect(await victim.proc.exited()).toEqual({ code: null, signal: 'SIGKILL' });
    expect(tokensAtKill).toBeGreaterThanOrEqual(20);
    expect(tokensAtKill).toBeLessThan(MAX_TOKENS);

    expect(done).toBe(true);
    expect(chunks.some((c) => 'error' in c)).toBe(false);
    const tokens = tokenIdsOf(chunks);
    expect(tokens).toHaveLength(MAX_TOKENS);
    expect(tokens).toEqual(expected);
    const finishes = chunks.flatMap((c) => ((c.choices ?? []) as Array<{ finish_reason: string | null }>).map((ch) => ch.finish_reason)).filter((f) => f !== null);
    expect(finishes).toEqual(['length']);
    const usage = chunks.at(-1)!.usage as { completion_tokens: number; prompt_tokens: number };
    expect(usage.completion_tokens).toBe(MAX_TOKENS);

    const frontend = await cluster.frontendMetrics();
    expect(metricValue(frontend, 'tandem_frontend_migrations_total', { model: MODEL })).toBe(1);
    // The rest of the stream came from the survivor.
    expect(metricValue(await scrape(survivor.statusUrl), 'tandem_worker_requests_total', LABELS)).toBeGreaterThanOrEqual(1);

    // Once the lease expires the dead worker leaves the frontend, and serving goes on.
    await cluster.waitForRoutable(1, { timeoutMs: 10_000 });
    const after = await post('/v1/completions', { model: MODEL, prompt: 'again', max_tokens: 8, ignore_eos: true });
    expect(after.status).toBe(200);
    expect(after.headers.get('x-worker-instance-id')).toBe(survivor.instanceId);
  });
});
