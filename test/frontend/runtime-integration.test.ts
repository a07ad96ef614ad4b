/**
 * The frontend on the real runtime: memory discovery shared by three runtimes (frontend + two
 * workers), the gRPC request plane, and EndpointClient behind the frontend's WorkerClient.
 * Checks streaming, cancellation reaching the worker handler's ctx.signal, and migration when
 * a worker's stream fails with 'unavailable' and when a worker process is gone.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { modelKey } from '../../runtime/discovery/keys.js';
import { UnavailableError } from '../../runtime/errors.js';
import type { RequestContext } from '../../runtime/request-plane/types.js';
import { ByteCodec, EOS, makeCard } from './fakes.js';
import { parseSse, postRaw, waitFor } from './harness.js';

const TEXT = 'streamed over grpc, token by token';

interface WorkerState {
  rt: DistributedRuntime;
  calls: Array<{ request: PreprocessedRequest; aborted: boolean }>;
  failAfter?: number;
  delayMs: number;
}

async function startWorker(store: MemoryDiscoveryStore): Promise<WorkerState> {
  const rt = await DistributedRuntime.create({ name: 'worker', discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
  const state: WorkerState = { rt, calls: [], delayMs: 0 };
  await rt.namespace().component('backend').endpoint('generate').serve<PreprocessedRequest, TokenDelta>(async function* (request, ctx: RequestContext) {
    const call = { request, aborted: false };
    state.calls.push(call);
    ctx.signal.addEventListener('abort', () => (call.aborted = true));
    const bytes = Buffer.from(TEXT);
    let pos = request.numPriorOutputTokens ?? 0;
    for (let n = 1; ; n++, pos++) {
      await new Promise((r) => setTimeout(r, state.delayMs));
      if (state.failAfter !== undefined && n > state.failAfter) throw new UnavailableError('worker lost its engine');
      const id = pos < bytes.length ? bytes[pos]! : EOS;
      const done = id === EOS || n >= request.stop.maxTokens;
      yield { tokenIds: [id], ...(done ? { finishReason: id === EOS ? 'stop' : 'length', usage: { promptTokens: request.tokenIds.length, completionTokens: n, cachedTokens: 2 } } : {}) } as TokenDelta;
      if (done) return;
    }
  });
  await rt.discovery.put(modelKey('tandem', 'fake-model', rt.instanceId), makeCard({ instanceId: rt.instanceId }));
  return state;
}

describe('frontend on the distributed runtime (memory discovery, gRPC)', () => {
  const store = new MemoryDiscoveryStore();
  let frontendRt: DistributedRuntime;
  let frontend: FrontendHandle;
  const workers: WorkerState[] = [];

  beforeAll(async () => {
    workers.push(await startWorker(store), await startWorker(store));
    frontendRt = await DistributedRuntime.create({ name: 'frontend', discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
    const codec = new ByteCodec();
    frontend = await startFrontend({ runtime: frontendRt, host: '127.0.0.1', httpPort: 0, codecLoader: async () => codec });
    await waitFor(() => frontend.models.model('fake-model')?.candidates().length === 2);
  });
  afterAll(async () => {
    await frontend?.close();
    await frontendRt?.shutdown();
    for (const w of workers) await w.rt.shutdown();
  });

  const byId = (id: string) => workers.find((w) => w.rt.instanceId === id)!;

  it('streams a chat completion through the request plane', async () => {
    const res = await postRaw(`${frontend.url}/v1/chat/completions`, JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: 'x' }], stream: true, stream_options: { include_usage: true } }));
    const chunks = parseSse(res.text).slice(0, -1).map((f) => JSON.parse(f));
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(TEXT);
    expect(chunks.at(-1).usage).toMatchObject({ completion_tokens: TEXT.length + 1, prompt_tokens_details: { cached_tokens: 2 } });
  });

  it('a client disconnect cancels the worker handler', async () => {
    const target = frontend.models.model('fake-model')!.candidates()[0]!;
    const worker = byId(target);
    worker.delayMs = 20;
    const before = worker.calls.length;
    const controller = new AbortController();
    const res = await fetch(`${frontend.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'fake-model', prompt: 'x', stream: true }),
      headers: { 'content-type': 'application/json', 'x-worker-instance-id': target },
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await waitFor(() => worker.calls[before]?.aborted === true);
    worker.delayMs = 0;
  });

  it("a worker stream failing with 'unavailable' migrates to the other worker", async () => {
    const [first, second] = frontend.models.model('fake-model')!.candidates();
    byId(first!).failAfter = 6;
    byId(second!).failAfter = 6;
    const res = await postRaw(`${frontend.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', max_tokens: 12 }));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text).choices[0]).toMatchObject({ text: TEXT.slice(0, 12), finish_reason: 'length' });
    byId(first!).failAfter = undefined;
    byId(second!).failAfter = undefined;
  });

  it('a worker whose process is gone (card still listed) costs one migration, then sits out', async () => {
    // A fresh frontend, so no cooldown left by the tests above.
    const fresh = await startFrontend({ runtime: frontendRt, host: '127.0.0.1', httpPort: 0, codecLoader: async () => new ByteCodec(), registry: new Registry() });
    try {
      await waitFor(() => fresh.models.model('fake-model')?.candidates().length === 2);
      // Round-robin starts at the first candidate: that is the one whose process goes away.
      const victim = byId(fresh.models.model('fake-model')!.candidates()[0]!);
      // The server stops but the memory lease (and so the card) stays, as after kill -9 before TTL.
      await (await victim.rt.requestServer()).close();
      const results = [];
      for (let i = 0; i < 4; i++) {
        const res = await postRaw(`${fresh.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', max_tokens: 5 }));
        results.push([res.status, JSON.parse(res.text).choices?.[0]?.text]);
      }
      expect(results).toEqual(Array(4).fill([200, TEXT.slice(0, 5)]));
      expect(await migrationCount(fresh.url)).toBe(1);
    } finally {
      await fresh.close();
    }
  });

  async function migrationCount(url: string): Promise<number> {
    const text = await (await fetch(`${url}/metrics`)).text();
    return Number(/tandem_frontend_migrations_total\{model="fake-model"\} (\d+)/.exec(text)?.[1] ?? 0);
  }
});
