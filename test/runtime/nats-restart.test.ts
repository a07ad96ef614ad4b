/**
 * NATS restart: publishers and subscribers resume by themselves after the server goes away and
 * comes back on the same port, publishing during the outage neither throws nor crashes, and no
 * promise is left rejected without a handler.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { NatsEventPlane } from '../../runtime/event-plane/index.js';
import type { EventScope } from '../../runtime/event-plane/event-plane.js';
import { startNats, type NatsHarness } from '../harness/nats.js';

async function waitFor(predicate: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('nats event plane across a server restart', () => {
  let nats: NatsHarness;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);

  beforeAll(async () => {
    process.on('unhandledRejection', onUnhandled);
    nats = await startNats({ jetstream: true });
  });

  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled);
    await nats.stop();
  });

  it('publisher and subscriber keep working after the server restarts, twice', async () => {
    const scope: EventScope = { namespace: 'restart', component: 'backend', topic: 'load_metrics' };
    const pub = await NatsEventPlane.connect({ servers: nats.url, instanceId: '00000000000000aa', durableAckTimeoutMs: 300 });
    const sub = await NatsEventPlane.connect({ servers: nats.url, instanceId: '00000000000000bb' });
    const received: string[] = [];
    await sub.subscribe<string>(scope, (event) => {
      expect(event.source).toBe('00000000000000aa');
      received.push(event.payload);
    });

    await pub.publish(scope, 'before');
    await waitFor(() => received.includes('before'), 3_000, 'delivery before the restart');

    for (const round of [1, 2]) {
      await nats.halt();
      await waitFor(() => !pub.isConnected && !sub.isConnected, 5_000, 'both clients to notice the outage');
      // Publishing into an outage is fire-and-forget: it resolves, plain or durable.
      await expect(pub.publish(scope, `during-${round}`)).resolves.toBeUndefined();
      await expect(pub.publish(scope, `during-durable-${round}`, { durable: true })).resolves.toBeUndefined();
      await sleep(300);
      await nats.start();
      await waitFor(() => pub.isConnected && sub.isConnected, 10_000, 'both clients to reconnect');

      // The subscriber's SUB is replayed on reconnect; publish until it is heard, then a burst.
      let probe = 0;
      const marker = `after-${round}-`;
      await waitFor(
        () => {
          if (received.some((r) => r.startsWith(marker))) return true;
          void pub.publish(scope, `${marker}${probe++}`);
          return false;
        },
        5_000,
        'the first event after the restart',
      );
      const burst = Array.from({ length: 200 }, (_, i) => `burst-${round}-${i}`);
      for (const item of burst) await pub.publish(scope, item);
      await waitFor(() => burst.every((item) => received.includes(item)), 5_000, 'the burst after the restart');
      expect(received.filter((r) => r.startsWith(`burst-${round}-`))).toEqual(burst);
      // Durable publishes work again once the server is back (the stream survives in the store dir).
      await pub.publish(scope, `durable-after-${round}`, { durable: true });
      await waitFor(() => received.includes(`durable-after-${round}`), 5_000, 'a durable event after the restart');
    }

    await pub.close();
    await sub.close();
    expect(unhandled).toEqual([]);
  });

  it('a process that starts while NATS is down fails fast with a typed error', async () => {
    await nats.halt();
    await expect(NatsEventPlane.connect({ servers: nats.url, instanceId: '00000000000000cc' })).rejects.toMatchObject({ code: 'unavailable' });
    await nats.start();
  });
});
