/**
 * The frontend's prefill router against in-process protocol fakes, over real HTTP: when it
 * disaggregates, what it sends to each side, that output equals aggregated output, fallbacks,
 * --enforce-disagg, faults, and that no pinned transfer outlives a request.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle, type FrontendOptions } from '../../frontend/frontend.js';
import { ByteCodec } from '../frontend/fakes.js';
import { waitFor } from '../frontend/harness.js';
import { metricValue } from '../harness/http.js';
import { FakeDisaggCluster, MODEL, expectedText } from './fakes.js';

const LONG = 'The quick brown fox jumps over the lazy dog. '.repeat(4); // 180 tokens
const SHORT = 'hi there';
const THRESHOLD = 64;

interface Env {
  cluster: FakeDisaggCluster;
  frontend: FrontendHandle;
}

let env: Env | undefined;
afterEach(async () => {
  if (!env) return;
  await env.frontend.close();
  await env.cluster.close();
  env = undefined;
});

async function start(roles: { prefill?: number; decode?: number; agg?: number }, options: Partial<FrontendOptions> = {}): Promise<Env> {
  const cluster = new FakeDisaggCluster();
  for (let i = 0; i < (roles.prefill ?? 0); i++) await cluster.add('prefill');
  for (let i = 0; i < (roles.decode ?? 0); i++) await cluster.add('decode');
  for (let i = 0; i < (roles.agg ?? 0); i++) await cluster.add('agg');
  const codec = new ByteCodec();
  const frontend = await startFrontend({
    discovery: cluster.frontendDiscovery,
    connector: cluster,
    host: '127.0.0.1',
    httpPort: 0,
    codecLoader: async () => codec,
    disagg: { minPrefillTokens: THRESHOLD },
    ...options,
  });
  const whole = (roles.decode ?? 0) + (roles.agg ?? 0);
  await waitFor(() => (frontend.models.model(MODEL)?.candidates().length ?? 0) === whole);
  await frontend.models.settled();
  env = { cluster, frontend };
  // Let the prefill pool connect its clients too.
  await new Promise((r) => setTimeout(r, 20));
  return env;
}

async function complete(e: Env, prompt: string, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${e.frontend.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 12, ...extra }),
  });
  const text = await res.text();
  return { res, text, json: res.ok && !extra.stream ? (JSON.parse(text) as { choices: Array<{ text: string }>; nvext?: Record<string, unknown>; usage: { prompt_tokens_details?: { cached_tokens: number } } }) : undefined };
}

function streamedText(sse: string): string {
  let out = '';
  for (const frame of sse.split('\n\n')) {
    if (!frame.startsWith('data: ') || frame === 'data: [DONE]') continue;
    const chunk = JSON.parse(frame.slice(6)) as { choices?: Array<{ text?: string }> };
    out += chunk.choices?.[0]?.text ?? '';
  }
  return out;
}

describe('prefill router (fake protocol workers over HTTP)', () => {
  it('a long prompt runs prefill then decode, names both workers, and equals aggregated output', async () => {
    const e = await start({ prefill: 1, decode: 1 });
    const [prefill] = e.cluster.all('prefill');
    const [decode] = e.cluster.all('decode');
    const { res, json } = await complete(e, LONG);
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(LONG, 12));
    expect(res.headers.get('x-prefill-worker-id')).toBe(prefill!.instanceId);
    expect(res.headers.get('x-decode-worker-id')).toBe(decode!.instanceId);
    expect(json!.nvext).toEqual({ prefill_worker_id: prefill!.instanceId, decode_worker_id: decode!.instanceId, disagg_path: 'disagg' });
    // The prompt's cache hit is the prefill worker's.
    expect(json!.usage.prompt_tokens_details?.cached_tokens).toBe(32);

    const sentPrefill = prefill!.calls[0]!;
    expect(sentPrefill.prefillOnly).toBe(true);
    expect(sentPrefill.stop.maxTokens).toBe(12);
    const sentDecode = decode!.calls[0]!;
    expect(sentDecode.kvTransfer?.prefillInstanceId).toBe(prefill!.instanceId);
    expect(sentDecode.tokenIds).toHaveLength(LONG.length + 1);
    expect(sentDecode.stop.maxTokens).toBe(11);
    expect(sentDecode.numPriorOutputTokens).toBe(1);
    expect(decode!.pulled).toBe(1);
    expect(e.cluster.pinnedTotal()).toBe(0);
    const metrics = await (await fetch(`${e.frontend.url}/metrics`)).text();
    expect(metricValue(metrics, 'tandem_frontend_disagg_requests_total', { model: MODEL, path: 'disagg' })).toBe(1);
  });

  it('streams the same tokens as an aggregated worker, several requests in flight', async () => {
    const e = await start({ prefill: 2, decode: 2 });
    const prompts = Array.from({ length: 6 }, (_, i) => `${i} `.repeat(40) + LONG.slice(i));
    const results = await Promise.all(prompts.map((p) => complete(e, p, { stream: true, max_tokens: 20 })));
    for (let i = 0; i < prompts.length; i++) {
      expect(results[i]!.res.status).toBe(200);
      expect(streamedText(results[i]!.text)).toBe(expectedText(prompts[i]!, 20));
    }
    // Round-robin within each pool: both prefill workers and both decode workers served.
    expect(e.cluster.all('prefill').map((w) => w.calls.length)).toEqual([3, 3]);
    expect(e.cluster.all('decode').map((w) => w.calls.length)).toEqual([3, 3]);
    expect(e.cluster.pinnedTotal()).toBe(0);
    expect(e.cluster.all().every((w) => w.inflight === 0)).toBe(true);
  });

  it('a prompt below --disagg-min-prefill-tokens runs aggregated on the decode pool', async () => {
    const e = await start({ prefill: 1, decode: 1 });
    const { res, json } = await complete(e, SHORT);
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(SHORT, 12));
    expect(res.headers.get('x-prefill-worker-id')).toBeNull();
    expect(json!.nvext).toBeUndefined();
    expect(e.cluster.all('prefill')[0]!.calls).toHaveLength(0);
    expect(e.cluster.all('decode')[0]!.calls[0]!.kvTransfer).toBeUndefined();
  });

  it('with no prefill workers it falls back to aggregated; --enforce-disagg answers 503 with Retry-After', async () => {
    const e = await start({ decode: 1 });
    const { res, json } = await complete(e, LONG);
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(LONG, 12));
    await e.frontend.close();
    const enforced = await startFrontend({
      discovery: e.cluster.frontendDiscovery,
      connector: e.cluster,
      host: '127.0.0.1',
      httpPort: 0,
      codecLoader: async () => new ByteCodec(),
      disagg: { minPrefillTokens: THRESHOLD, enforce: true },
    });
    e.frontend = enforced;
    await waitFor(() => (enforced.models.model(MODEL)?.candidates().length ?? 0) === 1);
    await enforced.models.settled();
    const refused = await complete(e, LONG);
    expect(refused.res.status).toBe(503);
    expect(refused.res.headers.get('retry-after')).toBe('1');
    expect(JSON.parse(refused.text).error.code).toBe('no_instances');
    // Short prompts are not disaggregation candidates: they still run.
    expect((await complete(e, SHORT)).res.status).toBe(200);
  });

  it('max_tokens 1: the prefill answer is the whole response, no decode call', async () => {
    const e = await start({ prefill: 1, decode: 1 });
    const { res, json } = await complete(e, LONG, { max_tokens: 1 });
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(LONG, 1));
    expect(e.cluster.all('decode')[0]!.calls).toHaveLength(0);
    expect(e.cluster.pinnedTotal()).toBe(0);
  });

  it('a dead prefill worker is replaced by another; with none left the request runs aggregated', async () => {
    const e = await start({ prefill: 2, decode: 1 });
    const [p0, p1] = e.cluster.all('prefill');
    p0!.dead = true;
    const first = await complete(e, LONG);
    expect(first.json!.choices[0]!.text).toBe(expectedText(LONG, 12));
    expect(p1!.calls).toHaveLength(1);
    expect(first.json!.nvext!.prefill_worker_id).toBe(p1!.instanceId);

    p1!.dead = true;
    const second = await complete(e, LONG + '!');
    expect(second.res.status).toBe(200);
    expect(second.json!.choices[0]!.text).toBe(expectedText(LONG + '!', 12));
    expect(second.json!.nvext).toMatchObject({ disagg_path: 'fallback', prefill_worker_id: null });
    const metrics = await (await fetch(`${e.frontend.url}/metrics`)).text();
    expect(metricValue(metrics, 'tandem_frontend_disagg_prefill_failures_total', { model: MODEL })).toBeGreaterThanOrEqual(2);
  });

  it('a decode worker that dies before its first token: the frontend releases the blocks and the stream moves on', async () => {
    const e = await start({ prefill: 1, decode: 2 });
    const decoders = e.cluster.all('decode');
    // Whichever decode worker the router picks first refuses the connection; the other serves
    // the resend (the pick order is the router's business, not this test's).
    let refused: (typeof decoders)[number] | undefined;
    for (const d of decoders) {
      const original = d.generate.bind(d);
      d.generate = ((req, signal) => {
        if (refused === undefined) {
          refused = d;
          throw Object.assign(new Error('connection refused'), { code: 'unavailable' });
        }
        return original(req, signal);
      }) as typeof d.generate;
    }
    const { res, json } = await complete(e, LONG);
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(LONG, 12));
    const prefill = e.cluster.all('prefill')[0]!;
    const served = decoders.find((d) => d !== refused)!;
    // Released by the frontend (the refused worker never got it); the resend carried no hand-off.
    expect(refused).toBeDefined();
    expect(prefill.releases).toHaveLength(1);
    expect(served.calls[0]!.kvTransfer).toBeUndefined();
    expect(served.calls[0]!.numPriorOutputTokens).toBe(1);
    expect(e.cluster.pinnedTotal()).toBe(0);
  });

  it('a decode worker killed mid-stream: the request migrates with prompt + tokens so far', async () => {
    const e = await start({ prefill: 1, decode: 2 });
    const [d0, d1] = e.cluster.all('decode');
    d0!.options.dieAfterTokens = 4;
    d1!.options.dieAfterTokens = 4;
    const { res, json } = await complete(e, LONG, { max_tokens: 9 });
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe(expectedText(LONG, 9));
    const resend = [d0!, d1!].flatMap((d) => d.calls).find((c) => c.kvTransfer === undefined)!;
    expect(resend.numPriorOutputTokens).toBe(5);
    expect(resend.tokenIds).toHaveLength(LONG.length + 5);
    expect(e.cluster.pinnedTotal()).toBe(0);
  });

  it('a stop string hit on the first token: the decode call is never made and the blocks are released', async () => {
    const e = await start({ prefill: 1, decode: 1 });
    const firstChar = expectedText(LONG, 1);
    const { res, json } = await complete(e, LONG, { stop: [firstChar] });
    expect(res.status).toBe(200);
    expect(json!.choices[0]!.text).toBe('');
    await waitFor(() => e.cluster.pinnedTotal() === 0);
    expect(e.cluster.all('decode')[0]!.calls).toHaveLength(0);
    expect(e.cluster.all('prefill')[0]!.releases).toHaveLength(1);
  });

  it('a client that disconnects during the prefill does not cancel it; its blocks are still released', async () => {
    const e = await start({ prefill: 1, decode: 1 });
    const prefill = e.cluster.all('prefill')[0]!;
    prefill.options.prefillMs = 100;
    const abort = new AbortController();
    const pending = fetch(`${e.frontend.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: LONG, max_tokens: 50, stream: true }),
      signal: abort.signal,
    });
    await waitFor(() => prefill.calls.length === 1);
    abort.abort();
    await pending.catch(() => undefined);
    await waitFor(() => prefill.inflight === 0 && prefill.releases.length === 1, 3000);
    expect(e.cluster.pinnedTotal()).toBe(0);
    expect(e.cluster.all('decode')[0]!.calls).toHaveLength(0);
    await waitFor(() => e.frontend.admission.inflight === 0);
  });
});
