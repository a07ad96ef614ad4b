/**
 * Server-sent events for OpenAI streaming: `data: <json>\n\n` frames ending in `data: [DONE]`.
 * A slow client gets backpressure (we wait for 'drain'), never an unbounded buffer.
 *
 * Writes are the frontend's main per-token cost (one syscall each), so frames are batched:
 * every frame queued in one tick goes out as a single `res.write` when the tick ends (the last
 * token, the finish chunk, the usage chunk and `[DONE]` leave as one write), and the response
 * headers leave with the first frame instead of in a write of their own. A first frame that
 * has not come within `headerFlushMs` (a long prefill) sends the headers alone, so clients
 * still see the response start.
 */
import type { ServerResponse } from 'node:http';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;

/** How long the headers may wait for the first frame. */
export const HEADER_FLUSH_MS = 20;

const DONE_FRAME = 'data: [DONE]\n\n';

export class SseWriter {
  /** Frames queued this tick, written together by flushQueued. */
  private queued = '';
  private flushScheduled = false;
  /** Set while the socket buffer is over its high-water mark. */
  private drain: Promise<void> | undefined;
  private headerTimer: NodeJS.Timeout | undefined;
  private readonly flushQueued = (): void => {
    this.flushScheduled = false;
    this.flush();
  };

  constructor(private readonly res: ServerResponse) {}

  open(extraHeaders: Record<string, string> = {}, headerFlushMs = HEADER_FLUSH_MS): void {
    this.res.writeHead(200, { ...SSE_HEADERS, ...extraHeaders });
    this.headerTimer = setTimeout(() => {
      this.headerTimer = undefined;
      // Nothing written yet (the first write clears this timer): send the headers alone.
      if (!this.closed && this.queued.length === 0) this.res.flushHeaders();
    }, headerFlushMs);
    this.headerTimer.unref();
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /**
   * Queue one `data:` frame for the end of this tick. Returns a promise only while the client
   * is not keeping up; await it before producing more.
   */
  send(json: string): Promise<void> | undefined {
    return this.frame(`data: ${json}\n\n`);
  }

  /** Queue one already-framed event (`event: …\ndata: …\n\n` for the APIs that name events); as `send`. */
  frame(frame: string): Promise<void> | undefined {
    if (this.closed) return undefined;
    this.queued += frame;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // nextTick runs after the microtasks of this tick, so every frame the pipeline produces
      // from one worker read is already queued.
      process.nextTick(this.flushQueued);
    }
    return this.drain;
  }

  /** Write queued frames now (before an error frame, say, so the order holds). */
  flush(): void {
    if (this.queued.length === 0) return;
    const chunk = this.queued;
    this.queued = '';
    if (this.closed) return;
    this.clearHeaderTimer();
    if (!this.res.write(chunk) && this.drain === undefined) this.drain = this.drained();
  }

  /** The queued frames and `[DONE]`, in the response's last write. */
  done(): void {
    this.end(DONE_FRAME);
  }

  /** Queued frames, then `tail` (already framed), then end the response. */
  end(tail: string): void {
    this.clearHeaderTimer();
    const chunk = this.queued + tail;
    this.queued = '';
    if (this.closed) return;
    this.res.end(chunk);
  }

  private clearHeaderTimer(): void {
    if (this.headerTimer === undefined) return;
    clearTimeout(this.headerTimer);
    this.headerTimer = undefined;
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const finish = () => {
        this.res.off('drain', finish);
        this.res.off('close', finish);
        this.drain = undefined;
        resolve();
      };
      this.res.on('drain', finish);
      this.res.on('close', finish);
    });
  }
}
