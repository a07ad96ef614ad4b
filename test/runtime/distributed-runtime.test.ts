/**
 * The runtime facade (DistributedRuntime → namespace → component → endpoint) with several
 * "processes" in one test: each runtime has its own memory-discovery lease on one shared
 * MemoryDiscoveryStore and its own real gRPC server on loopback. A client routes round-robin,
 * random or direct, and follows instances as they come and go. The status server answers
 * /health (ready only after markReady), /live and /metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InstanceId } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import type { EndpointClient, GenerateOptions } from '../../runtime/endpoint-client.js';
import { TandemError } from '../../runtime/errors.js';
import type { RequestContext } from '../../runtime/request-plane/types.js';
import { waitFor } from '../fixtures/discovery-events.js';

interface Who {
  instanceId: InstanceId;
  seq: number;
}

const NS = 'rt-facade';

async function collect<T>(make: () => AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of make()) out.push(item);
  return out;
}

describe('DistributedRuntime facade (memory discovery, real gRPC)', () => {
  const store = new MemoryDiscoveryStore();
  const runtimes: DistributedRuntime[] = [];
  let a: DistributedRuntime;
  let b: DistributedRuntime;
  let caller: DistributedRuntime;
  let client: EndpointClient;

  const create = async (name: string, statusPort?: number) => {
    const rt = await DistributedRuntime.create({
      name,
      discovery: 'memory',
      memoryStore: store,
      eventPlane: 'direct',
      host: '127.0.0.1',
      logLevel: 'silent',
      drainTimeoutMs: 1000,
      ...(statusPort !== undefined ? { statusPort } : {}),
    });
    runtimes.push(rt);
    return rt;
  };

  /** Serve `rt-facade/echo/generate` on `rt`: each call yields which instance answered. */
  const serveEcho = (rt: DistributedRuntime) =>
    rt
      .namespace(NS)
      .component('echo')
      .endpoint('generate')
      .serve(async function* (req: { n: number; fail?: boolean }, _ctx: RequestContext): AsyncGenerator<Who> {
        for (let seq = 0; seq < req.n; seq++) {
          if (req.fail && seq === 1) throw new TandemError('invalid_argument', 'asked to fail at item 1');
          yield { instanceId: rt.instanceId, seq };
        }
      });

  const whoAnswers = async (options: GenerateOptions): Promise<InstanceId> => {
    const items = await collect(() => client.generate<{ n: number }, Who>({ n: 2 }, options));
    expect(items.map((i) => i.seq)).toEqual([0, 1]);
    expect(items[0]!.instanceId).toBe(items[1]!.instanceId);
    return items[0]!.instanceId;
  };

  beforeAll(async () => {
    [a, b, caller] = await Promise.all([create('a'), create('b'), create('caller')]);
    await Promise.all([serveEcho(a), serveEcho(b)]);
    client = await caller.namespace(NS).component('echo').endpoint('generate').client();
    await client.waitForInstances(2, 5000);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runtimes.map((rt) => rt.shutdown('test done')));
  });

  it('lists both serving instances with their gRPC addresses', () => {
    expect(new Set(client.instanceIds())).toEqual(new Set([a.instanceId, b.instanceId]));
    for (const record of client.instances()) {
      expect(record.address).toMatch(/^127\.0\.0\.1:\d+$/);
      expect(record).toMatchObject({ namespace: NS, component: 'echo', endpoint: 'generate' });
    }
  });

  it('round-robin alternates between the two instances', async () => {
    const answers: InstanceId[] = [];
    for (let i = 0; i < 6; i++) answers.push(await whoAnswers({ routing: { mode: 'round-robin' } }));
    for (let i = 1; i < answers.length; i++) expect(answers[i]).not.toBe(answers[i - 1]);
    expect(answers.filter((id) => id === a.instanceId)).toHaveLength(3);
    expect(answers.filter((id) => id === b.instanceId)).toHaveLength(3);
  });

  it('random reaches both instances over many calls', async () => {
    const counts = new Map<InstanceId, number>();
    // 40 calls: the chance that a fair coin picks one side every time is 2^-39.
    for (let i = 0; i < 40; i++) {
      const id = await whoAnswers({ routing: { mode: 'random' } });
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(new Set(counts.keys())).toEqual(new Set([a.instanceId, b.instanceId]));
  });

  it('direct sends every call to the named instance only', async () => {
    for (const target of [a.instanceId, b.instanceId]) {
      for (let i = 0; i < 5; i++) expect(await whoAnswers({ routing: { mode: 'direct', instanceId: target } })).toBe(target);
    }
  });

  it('direct to an unknown instance fails with the typed code instance_not_found', async () => {
    const unknown = 'ffffffffffffffff';
    expect(client.instanceIds()).not.toContain(unknown);
    const failure = collect(() => client.generate<{ n: number }, Who>({ n: 1 }, { routing: { mode: 'direct', instanceId: unknown } }));
    await expect(failure).rejects.toBeInstanceOf(TandemError);
    await expect(failure).rejects.toMatchObject({ code: 'instance_not_found' });
  });

  it('a handler error reaches the client as a typed error after the items before it', async () => {
    const received: Who[] = [];
    let caught: unknown;
    try {
      for await (const item of client.generate<{ n: number; fail: boolean }, Who>({ n: 3, fail: true }, { routing: { mode: 'direct', instanceId: a.instanceId } })) {
        received.push(item);
      }
    } catch (err) {
      caught = err;
    }
    expect(received.map((r) => r.seq)).toEqual([0]);
    expect(caught).toBeInstanceOf(TandemError);
    expect(caught).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('asked to fail') });
  });

  it('onChange reports an instance that comes and then goes; routing follows', async () => {
    const seen: InstanceId[][] = [];
    const off = client.onChange((ids) => seen.push([...ids]));
    const c = await create('c');
    await serveEcho(c);
    await waitFor('instance c added', () => seen.some((ids) => ids.includes(c.instanceId)), 5000);
    expect(client.instanceIds()).toHaveLength(3);
    expect(await whoAnswers({ routing: { mode: 'direct', instanceId: c.instanceId } })).toBe(c.instanceId);

    await c.shutdown('leaving');
    await waitFor('instance c removed', () => seen.length > 0 && !seen.at(-1)!.includes(c.instanceId), 5000);
    off();
    expect(seen.at(-1)!.sort()).toEqual([a.instanceId, b.instanceId].sort());
    // Three round-robin calls after c left land only on a and b.
    for (let i = 0; i < 3; i++) expect([a.instanceId, b.instanceId]).toContain(await whoAnswers({ routing: { mode: 'round-robin' } }));
    await expect(collect(() => client.generate({ n: 1 }, { routing: { mode: 'direct', instanceId: c.instanceId } }))).rejects.toMatchObject({
      code: 'instance_not_found',
    });
  });

  it('a revoked lease removes the instance from the client view', async () => {
    const d = await create('d');
    await serveEcho(d);
    await waitFor('instance d added', () => client.instanceIds().includes(d.instanceId), 5000);
    expect(store.revokeLease(d.instanceId)).toBe(true);
    await waitFor('instance d removed', () => !client.instanceIds().includes(d.instanceId), 5000);
    expect(new Set(client.instanceIds())).toEqual(new Set([a.instanceId, b.instanceId]));
  });
});

describe('DistributedRuntime status server', () => {
  const store = new MemoryDiscoveryStore();
  let rt: DistributedRuntime;

  beforeAll(async () => {
    rt = await DistributedRuntime.create({ name: 'status', discovery: 'memory', memoryStore: store, eventPlane: 'direct', host: '127.0.0.1', statusPort: 0, logLevel: 'silent' });
  });
  afterAll(async () => {
    await rt?.shutdown('test done');
  });

  it('/health is 503 before markReady and 200 after; /live is 200 throughout', async () => {
    const url = rt.statusUrl!;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const before = await fetch(`${url}/health`);
    expect(before.status).toBe(503);
    expect(await before.json()).toEqual({ status: 'starting' });
    expect((await fetch(`${url}/live`)).status).toBe(200);

    await rt.namespace(NS).component('status').endpoint('generate').serve(async function* () {
      yield 1;
    });
    rt.markReady();
    const after = await fetch(`${url}/health`);
    expect(after.status).toBe(200);
    expect(await after.json()).toEqual({ status: 'ready' });
    expect((await fetch(`${url}/live`)).status).toBe(200);
  });

  it('served records carry the statusUrl in their metadata', async () => {
    const records = store.list<{ instanceId: string; metadata: Record<string, unknown> }>(`v1/instances/${NS}/status/`);
    expect(records).toHaveLength(1);
    expect(records[0]!.value.metadata.statusUrl).toBe(rt.statusUrl);
  });

  it('/metrics is Prometheus text with tandem_process_ metrics', async () => {
    const res = await fetch(`${rt.statusUrl}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    expect(text).toMatch(/^# HELP tandem_process_/m);
    expect(text).toMatch(/^tandem_process_process_resident_memory_bytes \d+/m);
  });

  it('/health turns 503 "draining" while shutdown drains an in-flight stream, then the server closes', async () => {
    const url = rt.statusUrl!;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    await rt.namespace(NS).component('status').endpoint('hold').serve(async function* () {
      yield 'started';
      await released;
      yield 'done';
    });
    const caller = await DistributedRuntime.create({ name: 'caller', discovery: 'memory', memoryStore: store, eventPlane: 'direct', host: '127.0.0.1', logLevel: 'silent' });
    try {
      const client = await caller.namespace(NS).component('status').endpoint('hold').client();
      await client.waitForInstances(1, 5000);
      const items: string[] = [];
      const iterator = client.generate<unknown, string>({})[Symbol.asyncIterator]();
      items.push((await iterator.next()).value as string);
      const shutdown = rt.shutdown('test');
      await waitFor('health draining', async () => (await fetch(`${url}/health`)).status === 503, 5000);
      expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'draining' });
      release();
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) items.push(next.value);
      await shutdown;
      expect(items).toEqual(['started', 'done']);
      await expect(fetch(`${url}/live`)).rejects.toThrow();
      client.close();
    } finally {
      await caller.shutdown('test done');
    }
  });
});
