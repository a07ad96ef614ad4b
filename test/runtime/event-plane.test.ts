/**
 * One contract suite for every EventPlane (nats over a real nats-server, direct over real gRPC
 * with memory discovery), plus the direct plane's discovery-driven behaviour.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import type { InstanceRecord } from '../../proto/wire.js';
import { instanceKey } from '../../runtime/discovery/keys.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { createEventPlane, DirectEventPlane, NatsEventPlane } from '../../runtime/event-plane/index.js';
import type { EventPlane, EventScope, ReceivedEvent } from '../../runtime/event-plane/event-plane.js';
import { GrpcRequestPlaneServer } from '../../runtime/request-plane/index.js';
import { startNats, type NatsHarness } from '../harness/nats.js';

interface Node {
  plane: EventPlane;
  instanceId: string;
}

interface Backend {
  name: string;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A new "process" with its own event plane; it is registered under `components`. */
  node(components: string[]): Promise<Node>;
}

const NS = 'contract';

async function waitFor(predicate: () => boolean, timeoutMs = 3_000): Promise<void> {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not met in time');
    await sleep(5);
  }
}

function recorder<T = unknown>() {
  const events: Array<ReceivedEvent<T>> = [];
  return { events, onEvent: (event: ReceivedEvent<T>) => void events.push(event) };
}

const cleanups: Array<() => Promise<void>> = [];

function natsBackend(): Backend {
  let nats: NatsHarness;
  let next = 1;
  return {
    name: 'nats',
    setup: async () => {
      nats = await startNats({ jetstream: true });
    },
    teardown: async () => nats.stop(),
    node: async () => {
      const instanceId = (next++).toString(16).padStart(16, '0');
      const plane = await createEventPlane('nats', { instanceId, natsServer: nats.url });
      expect(plane).toBeInstanceOf(NatsEventPlane);
      cleanups.push(() => plane.close());
      return { plane, instanceId };
    },
  };
}

function directBackend(): Backend {
  let store: MemoryDiscoveryStore;
  return {
    name: 'direct',
    setup: async () => {
      store = new MemoryDiscoveryStore();
    },
    teardown: async () => undefined,
    node: async (components) => {
      const discovery = new MemoryDiscovery({ store });
      const server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
      for (const component of components) {
        const record: InstanceRecord = { namespace: NS, component, endpoint: 'generate', instanceId: discovery.instanceId, address: server.address, metadata: {} };
        await discovery.put(instanceKey(NS, component, 'generate', discovery.instanceId), record);
      }
      const plane = await createEventPlane('direct', { instanceId: discovery.instanceId, discovery, server: async () => server });
      expect(plane).toBeInstanceOf(DirectEventPlane);
      cleanups.push(async () => {
        await plane.close();
        await server.close();
        await discovery.close();
      });
      return { plane, instanceId: discovery.instanceId };
    },
  };
}

for (const backend of [natsBackend(), directBackend()]) {
  describe(`event plane contract: ${backend.name}`, () => {
    beforeAll(() => backend.setup());
    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    });
    afterAll(() => backend.teardown());

    const scope: EventScope = { namespace: NS, component: 'backend', topic: 'kv_events' };

    it('delivers every event in order with the publisher as source and the payload intact', async () => {
      const pub = await backend.node(['backend']);
      const sub = await backend.node([]);
      const got = recorder<{ i: number; tokens: number[]; blob: Uint8Array; nested: { ok: boolean } }>();
      await sub.plane.subscribe(scope, got.onEvent);
      for (let i = 0; i < 500; i++) {
        await pub.plane.publish(scope, { i, tokens: [i, i + 1], blob: new Uint8Array([i & 255, 7]), nested: { ok: true } });
      }
      await waitFor(() => got.events.length === 500);
      expect(got.events.map((e) => e.payload.i)).toEqual([...Array(500).keys()]);
      expect(new Set(got.events.map((e) => e.source))).toEqual(new Set([pub.instanceId]));
      const last = got.events[499]!.payload;
      expect(last.tokens).toEqual([499, 500]);
      expect([...last.blob]).toEqual([499 & 255, 7]);
      expect(last.nested).toEqual({ ok: true });
    });

    it('keeps topics and components apart', async () => {
      const pub = await backend.node(['backend', 'router']);
      const sub = await backend.node([]);
      const kv = recorder();
      const load = recorder();
      const routerKv = recorder();
      await sub.plane.subscribe(scope, kv.onEvent);
      await sub.plane.subscribe({ ...scope, topic: 'load_metrics' }, load.onEvent);
      await sub.plane.subscribe({ ...scope, component: 'router' }, routerKv.onEvent);
      await pub.plane.publish(scope, 'kv');
      await pub.plane.publish({ ...scope, topic: 'load_metrics' }, 'load');
      await pub.plane.publish({ ...scope, component: 'router' }, 'router-kv');
      await waitFor(() => kv.events.length + load.events.length + routerKv.events.length === 3);
      await sleep(50);
      expect(kv.events.map((e) => e.payload)).toEqual(['kv']);
      expect(load.events.map((e) => e.payload)).toEqual(['load']);
      expect(routerKv.events.map((e) => e.payload)).toEqual(['router-kv']);
    });

    it('fans out to every subscriber and hears every publisher', async () => {
      const pubA = await backend.node(['backend']);
      const pubB = await backend.node(['backend']);
      const sub1 = await backend.node([]);
      const sub2 = await backend.node([]);
      const r1 = recorder<string>();
      const r2 = recorder<string>();
      await sub1.plane.subscribe(scope, r1.onEvent);
      await sub2.plane.subscribe(scope, r2.onEvent);
      await pubA.plane.publish(scope, 'a');
      await pubB.plane.publish(scope, 'b');
      await waitFor(() => r1.events.length === 2 && r2.events.length === 2);
      for (const r of [r1, r2]) {
        const bySource = Object.fromEntries(r.events.map((e) => [e.source, e.payload]));
        expect(bySource).toEqual({ [pubA.instanceId]: 'a', [pubB.instanceId]: 'b' });
      }
    });

    it('stops delivering after the subscription closes', async () => {
      const pub = await backend.node(['backend']);
      const sub = await backend.node([]);
      const got = recorder();
      const subscription = await sub.plane.subscribe(scope, got.onEvent);
      await pub.plane.publish(scope, 1);
      await waitFor(() => got.events.length === 1);
      await subscription.close();
      await subscription.close();
      await pub.plane.publish(scope, 2);
      await sleep(150);
      expect(got.events.map((e) => e.payload)).toEqual([1]);
    });

    it('a throwing handler does not stop later events', async () => {
      const pub = await backend.node(['backend']);
      const sub = await backend.node([]);
      const seen: unknown[] = [];
      await sub.plane.subscribe(scope, (event) => {
        seen.push(event.payload);
        if (event.payload === 'bad') throw new Error('handler bug');
      });
      await pub.plane.publish(scope, 'bad');
      await pub.plane.publish(scope, 'good');
      await waitFor(() => seen.length === 2);
      expect(seen).toEqual(['bad', 'good']);
    });

    it('durable publishes are delivered too; publishing with no subscriber or after close does not throw', async () => {
      const pub = await backend.node(['backend']);
      const sub = await backend.node([]);
      await expect(pub.plane.publish({ ...scope, topic: 'nobody' }, 'x')).resolves.toBeUndefined();
      const got = recorder();
      await sub.plane.subscribe(scope, got.onEvent);
      await pub.plane.publish(scope, 'durable-1', { durable: true });
      await pub.plane.publish(scope, 'durable-2', { durable: true });
      await waitFor(() => got.events.length === 2);
      expect(got.events.map((e) => e.payload)).toEqual(['durable-1', 'durable-2']);
      await pub.plane.close();
      await pub.plane.close();
      await expect(pub.plane.publish(scope, 'late')).resolves.toBeUndefined();
    });
  });
}

describe('direct event plane: discovery drives the streams', () => {
  const store = new MemoryDiscoveryStore();
  const scope: EventScope = { namespace: NS, component: 'backend', topic: 'load_metrics' };

  async function processWith(endpoints: string[]) {
    const discovery = new MemoryDiscovery({ store });
    const server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
    const plane = new DirectEventPlane({ instanceId: discovery.instanceId, discovery, server: async () => server });
    const keys: string[] = [];
    for (const endpoint of endpoints) {
      const key = instanceKey(NS, 'backend', endpoint, discovery.instanceId);
      await discovery.put(key, { namespace: NS, component: 'backend', endpoint, instanceId: discovery.instanceId, address: server.address, metadata: {} });
      keys.push(key);
    }
    cleanups.push(async () => {
      await plane.close();
      await server.close();
      await discovery.close();
    });
    return { discovery, server, plane, keys };
  }

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('opens one stream per instance even when it serves several endpoints', async () => {
    const pub = await processWith(['generate', 'clear_kv', 'stats']);
    const sub = await processWith([]);
    const got = recorder();
    await sub.plane.subscribe(scope, got.onEvent);
    expect(pub.server.topics.subscriberCount('tandem.contract.backend.load_metrics')).toBe(1);
    await pub.plane.publish(scope, 'once');
    await waitFor(() => got.events.length >= 1);
    await sleep(50);
    expect(got.events.map((e) => e.payload)).toEqual(['once']);
  });

  it('connects to instances that appear later and lets go of instances that leave', async () => {
    const sub = await processWith([]);
    const got = recorder();
    await sub.plane.subscribe(scope, got.onEvent);
    const pub = await processWith(['generate', 'stats']);
    const topic = 'tandem.contract.backend.load_metrics';
    await waitFor(() => pub.server.topics.subscriberCount(topic) === 1);
    await pub.plane.publish(scope, 'hello');
    await waitFor(() => got.events.length === 1);
    // Removing one endpoint keeps the stream (the instance still serves another one).
    await pub.discovery.delete(pub.keys[0]!);
    await sleep(50);
    expect(pub.server.topics.subscriberCount(topic)).toBe(1);
    await pub.discovery.delete(pub.keys[1]!);
    await waitFor(() => pub.server.topics.subscriberCount(topic) === 0);
    await pub.plane.publish(scope, 'unheard');
    await sleep(50);
    expect(got.events.map((e) => e.payload)).toEqual(['hello']);
  });

  it('reopens the stream when a listed instance restarts on the same address', async () => {
    const sub = await processWith([]);
    const got = recorder();
    await sub.plane.subscribe(scope, got.onEvent);
    const discovery = new MemoryDiscovery({ store });
    let server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
    const port = Number(server.address.split(':')[1]);
    const key = instanceKey(NS, 'backend', 'generate', discovery.instanceId);
    await discovery.put(key, { namespace: NS, component: 'backend', endpoint: 'generate', instanceId: discovery.instanceId, address: server.address, metadata: {} });
    const topic = 'tandem.contract.backend.load_metrics';
    await waitFor(() => server.topics.subscriberCount(topic) === 1);
    // The server goes away but the record stays (a crash within the lease TTL), then it is back.
    await server.close();
    server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1', port });
    const current = server;
    const plane = new DirectEventPlane({ instanceId: discovery.instanceId, discovery, server: async () => current });
    cleanups.push(async () => {
      await plane.close();
      await current.close();
      await discovery.close();
    });
    await waitFor(() => current.topics.subscriberCount(topic) === 1, 5_000);
    await plane.publish(scope, 'after-restart');
    await waitFor(() => got.events.length === 1);
    expect(got.events[0]).toEqual({ source: discovery.instanceId, payload: 'after-restart' });
  });

  it('a slow subscriber never blocks the publisher: its queue is bounded and overflow is counted', async () => {
    const pub = await processWith(['generate']);
    const sub = await processWith([]);
    const received: number[] = [];
    await sub.plane.subscribe<number>(scope, (event) => {
      received.push(event.payload);
      // Burn a little time per event so the subscriber falls behind.
      const until = performance.now() + 0.02;
      while (performance.now() < until);
    });
    const start = performance.now();
    for (let i = 0; i < 20_000; i++) await pub.plane.publish(scope, i);
    expect(performance.now() - start).toBeLessThan(3_000);
    // A burst in one tick overflows the 16,384-event queue; everything else arrives, in order.
    await waitFor(() => received.length + pub.server.topics.dropped === 20_000, 10_000);
    expect(pub.server.topics.dropped).toBeGreaterThan(0);
    expect(received.length).toBeGreaterThanOrEqual(16_384);
    for (let i = 1; i < received.length; i++) expect(received[i]!).toBeGreaterThan(received[i - 1]!);
  });
});
