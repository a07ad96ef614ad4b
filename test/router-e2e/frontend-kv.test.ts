/**
 * The real frontend in `--router-mode kv` over real mocker workers (one process, memory
 * discovery, gRPC, direct events): a hot prefix spreads instead of piling onto one worker, a
 * repeated prompt lands on the worker that cached it and `cached_tokens` reports that worker's
 * reuse, and a frontend delegating to a standalone router replica (`--router-endpoint`) does
 * the same while the replica's bookings return to zero when streams end.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { createKvSelector, type KvSelector } from '../../frontend/kv-selector.js';
import { LocalKvBackend } from '../../router/adapters/kv-routing-backend.js';
import { startRouterServer, type RunningRouter } from '../../router/adapters/router-server.js';
import { BLOCK, MODEL, Stack, tokens, waitFor } from './stack.js';

interface Completion {
  instance: string;
  cached: number;
  promptTokens: number;
}

async function complete(url: string, prompt: number[], maxTokens: number): Promise<Completion> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: maxTokens, ignore_eos: true }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`completion answered ${res.status}: ${text}`);
  const body = JSON.parse(text) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
  return { instance: res.headers.get('x-worker-instance-id')!, cached: body.usage.prompt_tokens_details.cached_tokens, promptTokens: body.usage.prompt_tokens };
}

describe('frontend --router-mode kv over mocker workers', () => {
  let stack: Stack;
  let selector: KvSelector;
  let frontend: FrontendHandle;

  beforeAll(async () => {
    // speedup 20: a 32-token answer takes long enough that a burst overlaps on the workers.
    stack = await Stack.start(4, { speedupRatio: 20 });
    const rt = await stack.runtime('frontend');
    selector = await createKvSelector(rt, 'tandem');
    frontend = await startFrontend({ runtime: rt, host: '127.0.0.1', httpPort: 0, selector });
    await waitFor('4 routable workers', () => frontend.models.model(MODEL)?.candidates().length === 4);
    // Warm the tokenizer and the router for the component.
    await complete(frontend.url, tokens(1, 8), 1);
  }, 60_000);

  afterAll(async () => {
    await frontend?.close();
    await selector?.close();
    await stack?.close();
  });

  const service = () => (selector.backend as LocalKvBackend).hub.started('backend')!;

  it('hot prefix: a burst sharing one long prefix spreads (busiest ≤ 2× least busy)', async () => {
    const prefix = tokens(7, 32 * BLOCK);
    const results = await Promise.all(Array.from({ length: 32 }, (_, i) => complete(frontend.url, [...prefix, ...tokens(1000 + i, 20)], 32)));
    const counts = new Map<string, number>(stack.workers.map((w) => [w.id, 0]));
    for (const r of results) counts.set(r.instance, (counts.get(r.instance) ?? 0) + 1);
    const values = [...counts.values()];
    expect(counts.size).toBe(4);
    expect(Math.min(...values)).toBeGreaterThan(0);
    expect(Math.max(...values)).toBeLessThanOrEqual(2 * Math.min(...values));
    // Every booking was released when its stream ended.
    await waitFor('bookings released', () => stack.workers.every((w) => service().load(w.id).activeSequences === 0));
    expect(selector.inflight).toBe(0);
  });

  it('a repeated prompt goes to the worker that cached it; cached_tokens is that worker’s reuse', async () => {
    const prompt = tokens(99, 10 * BLOCK + 5);
    const first = await complete(frontend.url, prompt, 4);
    expect(first.cached).toBe(0);
    await waitFor('prefix indexed', () => service().blocksOf(first.instance).length >= 10);
    const second = await complete(frontend.url, prompt, 4);
    expect(second.instance).toBe(first.instance);
    expect(second.promptTokens).toBe(prompt.length);
    // The worker reused the 10 full blocks of the prompt (the block manager reports it).
    expect(second.cached).toBe(10 * BLOCK);
  });

  describe('delegating to a standalone router replica (--router-endpoint router)', () => {
    let router: RunningRouter;
    let remoteSelector: KvSelector;
    let remote: FrontendHandle;

    beforeAll(async () => {
      router = await startRouterServer(await stack.runtime('router'), { namespace: 'tandem' });
      const rt = await stack.runtime('frontend-remote');
      remoteSelector = await createKvSelector(rt, 'tandem', { routerEndpoint: 'router' });
      remote = await startFrontend({ runtime: rt, host: '127.0.0.1', httpPort: 0, selector: remoteSelector });
      await waitFor('4 routable workers', () => remote.models.model(MODEL)?.candidates().length === 4);
      await waitFor('router replica listed', async () => (await rt.discovery.list('v1/instances/tandem/router/route/')).length === 1);
    });
    afterAll(async () => {
      await remote?.close();
      await remoteSelector?.close();
      await router?.close();
    });

    it('routes a repeated prompt to the caching worker and the replica frees its bookings', async () => {
      const prompt = tokens(4242, 12 * BLOCK);
      const first = await complete(remote.url, prompt, 4);
      const replica = await waitFor('replica router for backend', () => router.hub.started('backend'));
      await waitFor('prefix indexed by the replica', () => replica.blocksOf(first.instance).length >= 12);
      const second = await complete(remote.url, prompt, 4);
      expect(second.instance).toBe(first.instance);
      // A prompt of exactly 12 blocks: the worker recomputes the last block to get logits.
      expect(second.cached).toBe(11 * BLOCK);
      await waitFor('replica bookings released', () => stack.workers.every((w) => replica.load(w.id).activeSequences === 0));
      expect(replica.router.stats().decisions).toBeGreaterThanOrEqual(2);
    });
  });
});
