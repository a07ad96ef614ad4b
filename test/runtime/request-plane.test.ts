import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { DeadlineExceededError, TandemError, UnavailableError } from '../../runtime/errors.js';
import { GrpcRequestPlaneClient, GrpcRequestPlaneServer } from '../../runtime/request-plane/index.js';
import type { RequestContext } from '../../runtime/request-plane/types.js';

/** Resolves when the signal aborts (or immediately if it already has). */
function aborted(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

async function expectError(iterable: AsyncIterable<unknown>): Promise<{ error: TandemError; received: unknown[] }> {
  const received: unknown[] = [];
  try {
    for await (const item of iterable) received.push(item);
  } catch (error) {
    expect(error).toBeInstanceOf(TandemError);
    return { error: error as TandemError, received };
  }
  throw new Error('expected the stream to fail');
}

describe('request plane (gRPC over loopback)', () => {
  let server: GrpcRequestPlaneServer;
  let client: GrpcRequestPlaneClient;
  const held = { count: 0 };
  const lastSignal: { signal?: AbortSignal; abortedAt?: number; finallyAt?: number; reason?: unknown } = {};

  beforeAll(async () => {
    server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1', port: 0, maxMessageBytes: 1024 * 1024 });
    client = new GrpcRequestPlaneClient({ maxMessageBytes: 1024 * 1024 });

    server.register('t/count/generate', async function* (req: { n: number }) {
      for (let i = 0; i < req.n; i++) yield { i };
    });
    server.register('t/echo/generate', async function* (req: unknown, ctx: RequestContext) {
      yield { req, requestId: ctx.requestId, deadlineMs: ctx.deadlineMs ?? null };
    });
    // Holds a resource until the caller goes away; records when the signal fired and finally ran.
    server.register('t/hold/generate', async function* (_req: unknown, ctx: RequestContext) {
      held.count += 1;
      lastSignal.signal = ctx.signal;
      ctx.signal.addEventListener('abort', () => {
        lastSignal.abortedAt = performance.now();
        lastSignal.reason = ctx.signal.reason;
      });
      try {
        yield 'started';
        await aborted(ctx.signal);
        yield 'never-read';
      } finally {
        held.count -= 1;
        lastSignal.finallyAt = performance.now();
      }
    });
    server.register('t/fail/generate', async function* (req: { code?: string }) {
      yield 1;
      yield 2;
      if (req.code) throw new TandemError('resource_exhausted', 'kv blocks exhausted');
      throw new Error('boom');
    });
    server.register('t/big/generate', async function* (req: { bytes: number; count?: number }) {
      for (let i = 0; i < (req.count ?? 1); i++) yield Buffer.alloc(req.bytes, i);
    });
    server.register('t/endless/generate', async function* (_req: unknown, ctx: RequestContext) {
      let i = 0;
      while (!ctx.signal.aborted) {
        produced.value = ++i;
        yield i;
      }
    });
  });

  const produced = { value: 0 };

  afterAll(async () => {
    client.close();
    await server.close();
  });

  it('streams 10,000 items in order', async () => {
    const items = await collect(client.call<{ n: number }, { i: number }>({ address: server.address, path: 't/count/generate' }, { n: 10_000 }));
    expect(items).toHaveLength(10_000);
    for (let i = 0; i < items.length; i++) expect(items[i]!.i).toBe(i);
  });

  it('delivers the request, request id and deadline to the handler', async () => {
    const before = Date.now();
    const [reply] = await collect(
      client.call<unknown, { req: unknown; requestId: string; deadlineMs: number | null }>(
        { address: server.address, path: 't/echo/generate' },
        { tokens: [1, 2, 3], nested: { a: 'b' } },
        { requestId: 'req-42', timeoutMs: 5_000 },
      ),
    );
    expect(reply!.req).toEqual({ tokens: [1, 2, 3], nested: { a: 'b' } });
    expect(reply!.requestId).toBe('req-42');
    expect(reply!.deadlineMs).toBeGreaterThanOrEqual(before + 4_000);
    expect(reply!.deadlineMs).toBeLessThanOrEqual(Date.now() + 5_100);
  });

  it('a few concurrent calls share one channel (connection) per address', async () => {
    const fresh = new GrpcRequestPlaneClient();
    await Promise.all([1, 2, 3].map((n) => collect(fresh.call({ address: server.address, path: 't/count/generate' }, { n }))));
    await collect(fresh.call({ address: server.address, path: 't/count/generate' }, { n: 1 }));
    expect(fresh.channelCount).toBe(1);
    fresh.close();
  });

  it('client abort fires the handler signal within 100 ms and the server frees the call', async () => {
    const controller = new AbortController();
    const iterator = client.call({ address: server.address, path: 't/hold/generate' }, {}, { signal: controller.signal })[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toBe('started');
    expect(held.count).toBe(1);
    expect(server.inflight).toBe(1);
    const abortAt = performance.now();
    controller.abort();
    await expect(iterator.next()).rejects.toMatchObject({ code: 'cancelled' });
    while (server.inflight > 0 && performance.now() - abortAt < 1_000) await sleep(2);
    expect(lastSignal.abortedAt! - abortAt).toBeLessThan(100);
    expect(lastSignal.finallyAt).toBeDefined();
    expect((lastSignal.reason as TandemError).code).toBe('cancelled');
    expect(held.count).toBe(0);
    expect(server.inflight).toBe(0);
  });

  it('a consumer that stops early (break) cancels the server side', async () => {
    for await (const item of client.call({ address: server.address, path: 't/hold/generate' }, {})) {
      expect(item).toBe('started');
      break;
    }
    // A parked handler sends nothing more, so the cancel waits out the 1 s linger (see
    // request-plane-resets.test.ts for the cancel-on-more-data case).
    const start = performance.now();
    while (server.inflight > 0 && performance.now() - start < 5_000) await sleep(2);
    expect(held.count).toBe(0);
    expect(server.inflight).toBe(0);
  });

  it('a handler that throws mid-stream gives the client a typed error after the items it sent', async () => {
    const typed = await expectError(client.call({ address: server.address, path: 't/fail/generate' }, { code: 'x' }));
    expect(typed.received).toEqual([1, 2]);
    expect(typed.error.code).toBe('resource_exhausted');
    expect(typed.error.message).toBe('kv blocks exhausted');

    const foreign = await expectError(client.call({ address: server.address, path: 't/fail/generate' }, {}));
    expect(foreign.received).toEqual([1, 2]);
    expect(foreign.error.code).toBe('handler_error');
    expect(foreign.error.message).toBe('boom');
    expect(server.inflight).toBe(0);
  });

  it('deadline exceeded gives DeadlineExceededError and aborts the handler', async () => {
    const { error } = await expectError(client.call({ address: server.address, path: 't/hold/generate' }, {}, { timeoutMs: 150 }));
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const start = performance.now();
    while (server.inflight > 0 && performance.now() - start < 1_000) await sleep(2);
    expect((lastSignal.reason as TandemError).code).toBe('deadline_exceeded');
    expect(held.count).toBe(0);
  });

  it('enforces the max message size both ways with a typed error', async () => {
    const tooBigRequest = await expectError(client.call({ address: server.address, path: 't/echo/generate' }, Buffer.alloc(2 * 1024 * 1024)));
    expect(tooBigRequest.error.code).toBe('resource_exhausted');
    const tooBigReply = await expectError(client.call({ address: server.address, path: 't/big/generate' }, { bytes: 2 * 1024 * 1024 }));
    expect(tooBigReply.error.code).toBe('resource_exhausted');
    const fits = await collect(client.call<unknown, Uint8Array>({ address: server.address, path: 't/big/generate' }, { bytes: 512 * 1024 }));
    expect(fits[0]!.length).toBe(512 * 1024);
    // 30 items of 200 KiB come out faster than they drain: coalescing must split batches to stay
    // under the 1 MiB limit rather than fail the stream.
    const many = await collect(client.call<unknown, Uint8Array>({ address: server.address, path: 't/big/generate' }, { bytes: 200 * 1024, count: 30 }));
    expect(many.map((b) => b.length)).toEqual(Array(30).fill(200 * 1024));
    expect(many.map((b) => b[0])).toEqual([...Array(30).keys()]);
  });

  it('an unknown path is not_found; an unreachable address is unavailable', async () => {
    const missing = await expectError(client.call({ address: server.address, path: 'nope/nope/nope' }, {}));
    expect(missing.error.code).toBe('not_found');
    const down = await expectError(client.call({ address: '127.0.0.1:1', path: 't/echo/generate' }, {}, { timeoutMs: 2_000 }));
    expect(down.error).toBeInstanceOf(UnavailableError);
  });

  it('a slow consumer holds the producer back instead of queueing without bound', async () => {
    produced.value = 0;
    const controller = new AbortController();
    let consumed = 0;
    const iterable = client.call<unknown, number>({ address: server.address, path: 't/endless/generate' }, {}, { signal: controller.signal });
    const reader = (async () => {
      try {
        for await (const _ of iterable) {
          consumed += 1;
          if (consumed % 100 === 0) await sleep(5);
        }
      } catch {
        // cancelled below
      }
    })();
    await sleep(600);
    const lead = produced.value - consumed;
    const t0 = performance.now();
    controller.abort();
    await reader;
    // Items already buffered client-side are not delivered after the abort.
    expect(performance.now() - t0).toBeLessThan(200);
    expect(consumed).toBeGreaterThan(0);
    // Everything in flight (HTTP/2 windows + one batch + grpc buffers) stays well under what an
    // unbounded producer would reach in 600 ms (millions).
    expect(lead).toBeLessThan(200_000);
  });
});

describe('request plane drain', () => {
  it('waits for in-flight streams, then cancels stragglers with a typed unavailable error', async () => {
    const server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
    const client = new GrpcRequestPlaneClient();
    let finallyRan = 0;
    server.register('t/slow/generate', async function* (req: { ms: number }, ctx: RequestContext) {
      try {
        yield 'a';
        await Promise.race([sleep(req.ms), aborted(ctx.signal)]);
        if (!ctx.signal.aborted) yield 'b';
      } finally {
        finallyRan += 1;
      }
    });
    const quick = collect(client.call({ address: server.address, path: 't/slow/generate' }, { ms: 100 }));
    const stuck = expectError(client.call({ address: server.address, path: 't/slow/generate' }, { ms: 60_000 }));
    while (server.inflight < 2) await sleep(5);
    const start = performance.now();
    await server.drain(400);
    expect(performance.now() - start).toBeLessThan(2_000);
    expect(await quick).toEqual(['a', 'b']);
    const { error, received } = await stuck;
    expect(received).toEqual(['a']);
    expect(error.code).toBe('unavailable');
    expect(finallyRan).toBe(2);
    expect(server.inflight).toBe(0);
    const refused = await expectError(client.call({ address: server.address, path: 't/slow/generate' }, { ms: 1 }));
    expect(refused.error.code).toBe('unavailable');
    client.close();
    await server.close();
  });
});
