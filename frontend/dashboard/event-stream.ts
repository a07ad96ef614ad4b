/**
 * `GET /dashboard/events`: one SSE stream per open dashboard, all fed by one timer.
 *
 * - The timer runs only while at least one client is connected: with no dashboard open the
 *   frontend takes no snapshots at all.
 * - Each tick advances the state (the one place that does) and builds the view and its JSON
 *   once, writing the same frame to every client. A new client's first frame is a view only.
 * - A client whose unsent bytes (the response's buffer plus its socket's) exceed
 *   `maxBufferedBytes` is skipped for that tick, never queued for: every frame is a whole
 *   snapshot, so a skipped one loses only time resolution. A client skipped `maxSkippedFrames`
 *   ticks in a row is disconnected (its EventSource reconnects once it reads again).
 *   Memory per client is therefore at most the bound plus one frame.
 * - The stream starts with `retry: SSE_RETRY_MS`, so a browser reconnects after a frontend restart.
 *
 * Headers come from the OpenAI SSE writer (`SSE_HEADERS`); its writer class is not used because
 * it waits for 'drain' (right for a token stream that must not lose frames, wrong here).
 */
import type { ServerResponse } from 'node:http';
import { SSE_HEADERS } from '../http/sse.js';
import { SNAPSHOT_EVENT, SNAPSHOT_INTERVAL_MS, SSE_RETRY_MS, type DashboardSnapshot } from './snapshot.js';

/** What the stream reads: `advance` on its own ticks only, `view` for every frame. */
export interface SnapshotSource {
  advance(now: number): void;
  view(now: number): DashboardSnapshot;
}

export interface EventStreamOptions {
  intervalMs?: number;
  /** Unsent bytes a client may have before frames are skipped for it. */
  maxBufferedBytes?: number;
  /** Consecutive skipped frames before a client is dropped. */
  maxSkippedFrames?: number;
}

export const DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024;
export const DEFAULT_MAX_SKIPPED_FRAMES = 30;

interface Client {
  res: ServerResponse;
  skipped: number;
}

export interface EventStreamStats {
  clients: number;
  framesSent: number;
  framesSkipped: number;
  clientsDropped: number;
  /** Largest unsent byte count seen on any client at a tick. */
  maxBufferedSeen: number;
}

export class DashboardEventStream {
  private readonly clients = new Set<Client>();
  private timer: NodeJS.Timeout | undefined;
  private readonly intervalMs: number;
  private readonly maxBuffered: number;
  private readonly maxSkipped: number;
  private readonly counters = { framesSent: 0, framesSkipped: 0, clientsDropped: 0, maxBufferedSeen: 0 };

  constructor(
    private readonly source: SnapshotSource,
    options: EventStreamOptions = {},
    private readonly onClientsChanged?: (n: number) => void,
  ) {
    this.intervalMs = options.intervalMs ?? SNAPSHOT_INTERVAL_MS;
    this.maxBuffered = options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
    this.maxSkipped = options.maxSkippedFrames ?? DEFAULT_MAX_SKIPPED_FRAMES;
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Whether the snapshot timer is running (only while a client is connected). */
  get ticking(): boolean {
    return this.timer !== undefined;
  }

  stats(): EventStreamStats {
    return { clients: this.clients.size, ...this.counters };
  }

  /** Unsent bytes per connected client, now. */
  bufferedBytes(): number[] {
    return [...this.clients].map((c) => buffered(c.res));
  }

  attach(res: ServerResponse): void {
    const client: Client = { res, skipped: 0 };
    res.writeHead(200, { ...SSE_HEADERS });
    this.clients.add(client);
    res.on('close', () => this.detach(client));
    // The first snapshot goes out at once, so a page fills in without waiting a tick.
    // A view only: a client arriving must not move the rate window the others see.
    res.write(`retry: ${SSE_RETRY_MS}\n\n${this.frame(this.source.view(Date.now()))}`);
    this.counters.framesSent++;
    this.onClientsChanged?.(this.clients.size);
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.intervalMs);
      this.timer.unref();
    }
  }

  /** End every stream (frontend shutdown). */
  close(): void {
    for (const c of [...this.clients]) c.res.end();
    this.clients.clear();
    this.stop();
  }

  private detach(client: Client): void {
    if (!this.clients.delete(client)) return;
    this.onClientsChanged?.(this.clients.size);
    if (this.clients.size === 0) this.stop();
  }

  private stop(): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private tick(): void {
    if (this.clients.size === 0) return this.stop();
    const now = Date.now();
    this.source.advance(now);
    const frame = this.frame(this.source.view(now));
    for (const c of [...this.clients]) {
      if (c.res.destroyed || c.res.writableEnded) {
        this.detach(c);
        continue;
      }
      const unsent = buffered(c.res);
      if (unsent > this.counters.maxBufferedSeen) this.counters.maxBufferedSeen = unsent;
      if (unsent > this.maxBuffered) {
        this.counters.framesSkipped++;
        if (++c.skipped >= this.maxSkipped) {
          this.counters.clientsDropped++;
          c.res.destroy();
          this.detach(c);
        }
        continue;
      }
      c.skipped = 0;
      c.res.write(frame);
      this.counters.framesSent++;
    }
  }

  private frame(s: DashboardSnapshot): string {
    return `event: ${SNAPSHOT_EVENT}\ndata: ${JSON.stringify(s)}\n\n`;
  }
}

/** Unsent bytes: an OutgoingMessage's writableLength already includes its socket's buffer. */
function buffered(res: ServerResponse): number {
  return res.writableLength;
}
