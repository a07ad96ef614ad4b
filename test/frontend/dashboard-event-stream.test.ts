/**
 * DashboardEventStream over a real socket with a counting source: only the timer's tick
 * advances the state; a client arriving gets a view, so it never shortens the rate window the
 * other clients see (issue 23).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DashboardEventStream, type SnapshotSource } from '../../frontend/dashboard/event-stream.js';
import type { DashboardSnapshot } from '../../frontend/dashboard/snapshot.js';
import { pollUntil } from '../harness/http.js';

class CountingSource implements SnapshotSource {
  advances = 0;
  views = 0;
  advance(): void {
    this.advances++;
  }
  view(now: number): DashboardSnapshot {
    this.views++;
    return { t: now } as DashboardSnapshot;
  }
}

describe('DashboardEventStream: advance on ticks only', () => {
  let server: Server | undefined;
  const aborts: AbortController[] = [];
  afterEach(async () => {
    for (const a of aborts) a.abort();
    await new Promise((r) => server?.close(r));
  });

  it('3 clients connecting advance nothing; each tick advances once for all of them', { timeout: 30_000 }, async () => {
    const source = new CountingSource();
    const stream = new DashboardEventStream(source, { intervalMs: 3000 });
    server = createServer((_req, res) => stream.attach(res));
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/dashboard/events`;
    for (let i = 0; i < 3; i++) {
      const a = new AbortController();
      aborts.push(a);
      const res = await fetch(url, { signal: a.signal });
      const reader = res.body!.getReader();
      await reader.read(); // the first frame: a view
    }
    expect(source.advances).toBe(0);
    expect(source.views).toBe(3);
    await pollUntil('two ticks', () => source.advances >= 2, 20_000);
    // One advance and one view per tick, whatever the number of clients (plus the 3 first frames).
    expect(source.views - 3).toBeGreaterThanOrEqual(source.advances);
    expect(source.views - 3).toBeLessThanOrEqual(source.advances + 1);
    stream.close();
  });
});
