/**
 * Server-sent events for OpenAI streaming: `data: <json>\n\n` frames ending in `data: [DONE]`.
 * A slow client gets backpressure (we wait for 'drain'), never an unbounded buffer.
 */
import type { ServerResponse } from 'node:http';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;

export class SseWriter {
  constructor(private readonly res: ServerResponse) {}

  open(extraHeaders: Record<string, string> = {}): void {
    this.res.writeHead(200, { ...SSE_HEADERS, ...extraHeaders });
    this.res.flushHeaders();
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /** Write one `data:` frame; resolves when the socket can take more. */
  async send(json: string): Promise<void> {
    if (this.closed) return;
    if (!this.res.write(`data: ${json}\n\n`)) await this.drained();
  }

  done(): void {
    if (this.closed) return;
    this.res.end('data: [DONE]\n\n');
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const finish = () => {
        this.res.off('drain', finish);
        this.res.off('close', finish);
        resolve();
      };
      this.res.on('drain', finish);
      this.res.on('close', finish);
    });
  }
}
