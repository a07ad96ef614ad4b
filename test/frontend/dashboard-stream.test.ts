/**
 * `/dashboard/events` over real sockets, in front of in-process fake workers:
 *   - no snapshot timer runs while no dashboard is connected;
 *   - a client that stops reading never makes the server hold more than the per-client bound
 *     (plus one frame): frames are skipped for it, and after `maxSkippedFrames` in a row it is
 *     dropped; a client that reads again gets frames again.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../harness/http.js';
import { startTestFrontend, type TestFrontend } from './harness.js';

const BOUND = 32 * 1024;

function rawEvents(url: string): Promise<{ socket: Socket; received: () => number; closed: Promise<void> }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let bytes = 0;
    const closed = new Promise<void>((r) => socket.on('close', () => r()));
    socket.on('error', () => undefined);
    socket.once('connect', () => {
      socket.write(`GET /dashboard/events HTTP/1.1\r\nhost: ${hostname}\r\n\r\n`);
      socket.once('data', (first) => {
        bytes += first.length;
        socket.on('data', (d) => (bytes += d.length));
        resolve({ socket, received: () => bytes, closed });
      });
    });
    socket.once('error', reject);
  });
}

async function fill(t: TestFrontend, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await fetch(`${t.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'fake-model', prompt: `p${i}`, max_tokens: 2 }) });
    await res.text();
  }
}

describe('dashboard event stream', () => {
  let t: TestFrontend;

  beforeAll(async () => {
    t = await startTestFrontend(
      { dashboard: { stream: { intervalMs: 5, maxBufferedBytes: BOUND, maxSkippedFrames: 400 } } },
      async (cluster) => {
        for (let i = 0; i < 3; i++) await cluster.addWorker({ text: 'hi' });
      },
    );
    // 50 routing decisions make every frame several KB, so a paused reader backs up sooner.
    await fill(t, 60);
  });
  afterAll(async () => {
    await t?.close();
  });

  it('runs no snapshot timer while no client is connected', async () => {
    const stream = t.frontend.dashboard!.stream;
    expect(stream.ticking).toBe(false);
    const c = await rawEvents(t.url);
    expect(stream.ticking).toBe(true);
    await pollUntil('a few frames', () => c.received() > 20_000, 10_000);
    c.socket.destroy();
    await pollUntil('timer stopped', () => !stream.ticking && stream.clientCount === 0, 10_000);
  });

  it('a client that stops reading is skipped, bounded, then dropped', async () => {
    const stream = t.frontend.dashboard!.stream;
    const before = stream.stats();
    const frameBytes = JSON.stringify(t.frontend.dashboard!.state.view(Date.now())).length + 64;
    expect(frameBytes).toBeGreaterThan(4000);
    const c = await rawEvents(t.url);
    c.socket.pause();
    let maxBuffered = 0;
    await pollUntil(
      'frames skipped for the paused client',
      () => {
        for (const b of stream.bufferedBytes()) maxBuffered = Math.max(maxBuffered, b);
        return stream.stats().framesSkipped > before.framesSkipped;
      },
      90_000,
      5,
    );
    // Never more than the bound plus the one frame that crossed it (the kernel holds the rest).
    expect(maxBuffered).toBeLessThanOrEqual(BOUND + frameBytes);
    expect(stream.stats().maxBufferedSeen).toBeLessThanOrEqual(BOUND + frameBytes);
    await pollUntil('the paused client dropped', () => stream.stats().clientsDropped > before.clientsDropped, 60_000);
    expect(stream.clientCount).toBe(0);
    c.socket.resume();
    await c.closed;
  }, 180_000);

  it('a client that is slow only for a while gets frames again', async () => {
    const stream = t.frontend.dashboard!.stream;
    const before = stream.stats();
    const c = await rawEvents(t.url);
    c.socket.pause();
    await pollUntil('frames skipped', () => stream.stats().framesSkipped > before.framesSkipped, 90_000, 5);
    const skipped = stream.stats().framesSkipped;
    c.socket.resume();
    const got = c.received();
    await pollUntil('frames flow again', () => c.received() > got + 100_000, 30_000);
    expect(stream.stats().clientsDropped).toBe(before.clientsDropped);
    expect(stream.stats().framesSkipped - skipped).toBeLessThan(400);
    c.socket.destroy();
  }, 180_000);
});
