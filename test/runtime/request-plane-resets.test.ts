/**
 * Issue 12, fault 4: the request plane under many streams and many cancels. A worker's HTTP/2
 * server (nghttp2) closes a connection with GOAWAY(INTERNAL_ERROR) once it has received more
 * than 1000 RST_STREAMs in a burst (then 33/s), failing every stream on it. These tests drive
 * that guard over loopback with a real GrpcRequestPlaneServer and client.
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Metadata, status as GrpcStatus } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectRefusedError, TandemError } from '../../runtime/errors.js';
import { freePort } from '../harness/ports.js';
import { GrpcRequestPlaneClient, GrpcRequestPlaneServer, ResetBudget } from '../../runtime/request-plane/index.js';
import type { RequestContext } from '../../runtime/request-plane/types.js';
import { ERROR_CODE_METADATA_KEY, fromServiceError } from '../../runtime/request-plane/wire-errors.js';

/** No guard on our side: every cancel is sent, as before the fix. */
const UNGUARDED = { burst: 1e9, ratePerSecond: 1 };

function aborted(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Established TCP connections from this process to `port` (client and server share the process; count the client ends). */
function connectionsTo(port: number): number {
  let count = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 4 || cols[3] !== '01') continue;
      if (Number.parseInt(cols[2]!.split(':')[1]!, 16) === port) count += 1;
    }
  }
  return count;
}

async function until(what: string, predicate: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = performance.now();
  while (!predicate()) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

describe('reset budget (mirror of nghttp2 stream_reset_ratelim)', () => {
  it('worked example: 967 cancels pass, the 968th is refused (33 kept in reserve); 2 s later 66 more pass', () => {
    const budget = new ResetBudget({ burst: 1000, ratePerSecond: 33 }, 0);
    let sent = 0;
    while (budget.take(100)) sent += 1;
    expect(sent).toBe(967);
    expect(budget.available(999)).toBe(33);
    // nghttp2 refills per whole elapsed second: at 2.5 s, 2 × 33 more.
    expect(budget.available(2_500)).toBe(99);
    let more = 0;
    while (budget.take(2_600)) more += 1;
    expect(more).toBe(66);
    // Never above the burst.
    expect(budget.available(3_600_000)).toBe(1000);
  });
});

describe('transport failures are retryable', () => {
  it('a stream killed with its HTTP/2 session is unavailable; a tagged or unrelated INTERNAL stays internal', () => {
    const sessionClosed = fromServiceError({
      code: GrpcStatus.INTERNAL,
      details: 'Received RST_STREAM with code 2 triggered by internal client error: Session closed with error code 2',
      metadata: new Metadata(),
    });
    expect(sessionClosed.code).toBe('unavailable');
    expect(fromServiceError({ code: GrpcStatus.INTERNAL, details: 'Received RST_STREAM with code 0 (Call ended without gRPC status)', metadata: new Metadata() }).code).toBe('unavailable');
    const tagged = new Metadata();
    tagged.set(ERROR_CODE_METADATA_KEY, 'internal');
    expect(fromServiceError({ code: GrpcStatus.INTERNAL, details: 'Received RST_STREAM in a handler message', metadata: tagged }).code).toBe('internal');
    expect(fromServiceError({ code: GrpcStatus.INTERNAL, details: 'Failed to parse server response', metadata: new Metadata() }).code).toBe('internal');
  });

  it('a call to an address where nothing listens fails as ConnectRefusedError (unavailable, and definite)', async () => {
    const port = await freePort(); // bound and released: nothing listens there now
    const client = new GrpcRequestPlaneClient();
    try {
      let caught: unknown;
      try {
        for await (const _ of client.call({ address: `127.0.0.1:${port}`, path: 'ns/c/generate' }, {}, { timeoutMs: 10_000 })) void _;
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(ConnectRefusedError);
      expect((caught as TandemError).code).toBe('unavailable');
      // A dropped connection is unavailable too, but not definite.
      expect(fromServiceError({ code: GrpcStatus.UNAVAILABLE, details: 'Connection dropped', metadata: new Metadata() })).not.toBeInstanceOf(ConnectRefusedError);
    } finally {
      client.close();
    }
  });
});

describe('request plane under many streams and cancels (loopback)', () => {
  let server: GrpcRequestPlaneServer;
  let port: number;
  const seen = { cancelled: 0, finished: 0 };
  let release: () => void = () => undefined;
  let released = Promise.resolve();

  beforeAll(async () => {
    server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
    port = Number(server.address.split(':').pop());
    // The last item, then a pause before the status: a busy worker's event loop does that.
    server.register('t/finish-late/generate', async function* (req: { lateMs: number }, ctx: RequestContext) {
      try {
        yield 'first';
        yield 'last';
        await Promise.race([sleep(req.lateMs), aborted(ctx.signal)]);
      } finally {
        if (ctx.signal.aborted) seen.cancelled += 1;
        else seen.finished += 1;
      }
    });
    server.register('t/endless/generate', async function* (_req: unknown, ctx: RequestContext) {
      try {
        for (let i = 0; !ctx.signal.aborted; i++) {
          yield i;
          if (i % 16 === 15) await sleep(1);
        }
      } finally {
        seen.cancelled += 1;
      }
    });
    // A slow, long stream: the witness that its connection survived.
    server.register('t/ticks/generate', async function* (req: { n: number; everyMs: number }) {
      for (let i = 0; i < req.n; i++) {
        yield i;
        await sleep(req.everyMs);
      }
    });
    server.register('t/park/generate', async function* (_req: unknown, ctx: RequestContext) {
      try {
        yield 'started';
        await Promise.race([released, aborted(ctx.signal)]);
        if (!ctx.signal.aborted) yield 'released';
      } finally {
        if (ctx.signal.aborted) seen.cancelled += 1;
      }
    });
  });

  afterAll(async () => {
    await server.close();
  });

  const reset = () => {
    seen.cancelled = 0;
    seen.finished = 0;
  };

  it('consumers that stop on the final item send no RST_STREAM: 3,000 calls (1,000 at a time) with a late status all finish, and a witness on the same connection completes', async () => {
    reset();
    // One connection, no client-side guard, a linger far longer than the test: only evidence may cancel.
    const client = new GrpcRequestPlaneClient({ channelsPerAddress: 1, resetLimits: UNGUARDED, returnLingerMs: 60_000 });
    const witness = (async () => {
      let n = 0;
      for await (const _ of client.call({ address: server.address, path: 't/ticks/generate' }, { n: 100, everyMs: 20 })) n += 1;
      return n;
    })();
    let next = 0;
    const lane = async () => {
      while (next < 3_000) {
        next += 1;
        for await (const item of client.call<unknown, string>({ address: server.address, path: 't/finish-late/generate' }, { lateMs: 100 })) {
          if (item === 'last') break;
        }
      }
    };
    await Promise.all(Array.from({ length: 1_000 }, lane));
    expect(await witness).toBe(100);
    await until('every handler done', () => seen.cancelled + seen.finished === 3_000);
    expect(seen).toEqual({ cancelled: 0, finished: 3_000 });
    expect(client.channelCount).toBe(1);
    client.close();
  });

  it('a consumer that stops while the server keeps producing cancels at once, not after the linger', async () => {
    reset();
    const client = new GrpcRequestPlaneClient({ returnLingerMs: 60_000 });
    let read = 0;
    for await (const _ of client.call({ address: server.address, path: 't/endless/generate' }, {})) {
      if (++read === 3) break;
    }
    await until('server side cancelled', () => seen.cancelled === 1 && server.inflight === 0);
    client.close();
  });

  it('a consumer that leaves a parked server cancels it after the linger', async () => {
    reset();
    released = new Promise((resolve) => (release = resolve));
    const client = new GrpcRequestPlaneClient({ returnLingerMs: 300 });
    const left = performance.now();
    for await (const item of client.call({ address: server.address, path: 't/park/generate' }, {})) {
      expect(item).toBe('started');
      break;
    }
    await until('parked handler cancelled', () => seen.cancelled === 1 && server.inflight === 0);
    // Not before the linger: silence alone is no evidence until then.
    expect(performance.now() - left).toBeGreaterThanOrEqual(250);
    client.close();
    release();
  });

  it('1,000 concurrent calls to one address spread over 4 TCP connections by least-active; a few calls use one', async () => {
    reset();
    released = new Promise((resolve) => (release = resolve));
    const client = new GrpcRequestPlaneClient();
    const few = await Promise.all([1, 2, 3].map(async () => {
      const it = client.call({ address: server.address, path: 't/finish-late/generate' }, { lateMs: 0 })[Symbol.asyncIterator]();
      return (await it.next()).value as string;
    }));
    expect(few).toEqual(['first', 'first', 'first']);
    expect(client.channelCount).toBe(1);
    await until('1 connection', () => connectionsTo(port) === 1);

    const calls = Array.from({ length: 1_000 }, () => client.call<unknown, string>({ address: server.address, path: 't/park/generate' }, {})[Symbol.asyncIterator]());
    expect((await Promise.all(calls.map((c) => c.next()))).every((r) => r.value === 'started')).toBe(true);
    const stats = client.channelStats(server.address);
    expect(stats).toHaveLength(4);
    expect(connectionsTo(port)).toBe(4);
    const actives = stats.map((s) => s.active);
    expect(actives.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1_000);
    expect(Math.max(...actives) - Math.min(...actives)).toBeLessThanOrEqual(64);
    release();
    for (const call of calls) {
      expect((await call.next()).value).toBe('released');
      expect((await call.next()).done).toBe(true);
    }
    client.close();
  });

  it('2,500 client aborts within seconds on one address never trip the guard: the witness completes, worn connections retire', async () => {
    reset();
    // One serving connection at a time, so all the cancels would land on it without the budget.
    const client = new GrpcRequestPlaneClient({ channelsPerAddress: 1 });
    const witness = (async () => {
      let n = 0;
      for await (const _ of client.call({ address: server.address, path: 't/ticks/generate' }, { n: 150, everyMs: 20 })) n += 1;
      return n;
    })();
    const failures: string[] = [];
    let next = 0;
    const lane = async () => {
      while (next < 2_500) {
        next += 1;
        const controller = new AbortController();
        try {
          for await (const _ of client.call({ address: server.address, path: 't/endless/generate' }, {}, { signal: controller.signal })) controller.abort();
        } catch (err) {
          if ((err as TandemError).code !== 'cancelled') failures.push(String(err));
        }
      }
    };
    await Promise.all(Array.from({ length: 100 }, lane));
    expect(failures.slice(0, 3)).toEqual([]);
    expect(await witness).toBe(150);
    // Every abort really cancelled its handler (none was left to run)...
    await until('every handler cancelled', () => seen.cancelled === 2_500 && server.inflight === 0);
    // ...and the connections in use now have budget left (worn ones were retired along the way).
    for (const s of client.channelStats(server.address)) expect(s.resetsLeft).toBeGreaterThan(33);
    client.close();
  });

  it('without the budget the guard fires, and the streams it kills are unavailable (retryable), not internal', async () => {
    reset();
    const client = new GrpcRequestPlaneClient({ channelsPerAddress: 1, resetLimits: UNGUARDED });
    const witness = (async () => {
      try {
        for await (const _ of client.call({ address: server.address, path: 't/ticks/generate' }, { n: 500, everyMs: 20 }));
        return undefined;
      } catch (err) {
        return err as TandemError;
      }
    })();
    let next = 0;
    const lane = async () => {
      while (next < 3_000) {
        next += 1;
        const controller = new AbortController();
        try {
          for await (const _ of client.call({ address: server.address, path: 't/endless/generate' }, {}, { signal: controller.signal })) controller.abort();
        } catch {
          // cancelled, or killed with the session
        }
      }
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: 100 }, lane));
    console.info(`3,000 aborts in ${Math.round(performance.now() - started)} ms`);
    const error = await witness;
    expect(error).toBeInstanceOf(TandemError);
    expect(error!.code).toBe('unavailable');
    expect(error!.message).toMatch(/RST_STREAM|Session closed|GOAWAY/);
    client.close();
  });
});
