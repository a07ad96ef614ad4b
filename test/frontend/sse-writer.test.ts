/**
 * SseWriter on a real loopback socket: frames queued in one tick leave as one write, the
 * headers leave with the first frame (or alone when it is late), the wire bytes stay exact
 * SSE framing, and a client that stops reading gets backpressure, released when it reads.
 */
import { once } from 'node:events';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { SseWriter } from '../../frontend/http/sse.js';

type Handler = (res: ServerResponse) => Promise<void> | void;

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function serve(handler: Handler): Promise<number> {
  server = createServer((req, res) => {
    req.resume();
    void handler(res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** A raw client: every socket read is kept separately, so we can see what arrived together. */
async function rawGet(port: number): Promise<{ socket: Socket; reads: string[]; ended: Promise<void> }> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const reads: string[] = [];
  socket.on('data', (chunk: Buffer) => reads.push(chunk.toString('utf8')));
  let tail = '';
  const ended = new Promise<void>((resolve) => {
    socket.on('close', () => resolve());
    // The response ends with the zero-length chunk of chunked encoding.
    socket.on('data', (chunk: Buffer) => {
      tail = (tail + chunk.toString('latin1')).slice(-5);
      if (tail === '0\r\n\r\n') socket.end();
    });
  });
  socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n');
  return { socket, reads, ended };
}

/** Counts res.write / res.end calls (the response's own methods, wrapped, still run). */
function countWrites(res: ServerResponse): string[] {
  const calls: string[] = [];
  const write = res.write.bind(res) as (chunk: string) => boolean;
  const end = res.end.bind(res) as (chunk: string) => ServerResponse;
  res.write = ((chunk: string) => {
    calls.push(`write:${chunk}`);
    return write(chunk);
  }) as ServerResponse['write'];
  res.end = ((chunk: string) => {
    calls.push(`end:${chunk}`);
    return end(chunk);
  }) as ServerResponse['end'];
  return calls;
}

/** The body of a chunked response, de-chunked. */
function body(raw: string): string {
  let rest = raw.slice(raw.indexOf('\r\n\r\n') + 4);
  let out = '';
  for (;;) {
    const eol = rest.indexOf('\r\n');
    const size = parseInt(rest.slice(0, eol), 16);
    if (size === 0) return out;
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 2 + size + 2);
  }
}

describe('frontend: SseWriter', () => {
  it('frames queued in one tick go out as one write; the last frames and [DONE] as one end', async () => {
    let calls: string[] = [];
    const port = await serve(async (res) => {
      calls = countWrites(res);
      const sse = new SseWriter(res);
      sse.open();
      sse.send('{"n":1}');
      sse.send('{"n":2}');
      sse.send('{"n":3}');
      await sleep(5);
      sse.send('{"n":4}');
      sse.send('{"n":5}');
      sse.done();
    });
    const client = await rawGet(port);
    await client.ended;
    expect(calls).toEqual(['write:data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\n', 'end:data: {"n":4}\n\ndata: {"n":5}\n\ndata: [DONE]\n\n']);
    expect(body(client.reads.join(''))).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: {"n":4}\n\ndata: {"n":5}\n\ndata: [DONE]\n\n');
  });

  it('the headers travel with the first frame, not in a write of their own', async () => {
    const port = await serve(async (res) => {
      const sse = new SseWriter(res);
      sse.open({ 'x-request-id': 'r1' }, 1_000);
      // Long enough that a separate header write would arrive in a read of its own.
      await sleep(40);
      sse.send('{"first":true}');
      await sleep(5);
      sse.done();
    });
    const client = await rawGet(port);
    await client.ended;
    const first = client.reads[0]!;
    expect(first).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(first).toContain('content-type: text/event-stream; charset=utf-8\r\n');
    expect(first).toContain('x-request-id: r1\r\n');
    expect(first).toContain('data: {"first":true}\n\n');
  });

  it('a first frame later than headerFlushMs finds the headers already sent', async () => {
    let headersRead!: () => void;
    const clientHasHeaders = new Promise<void>((resolve) => (headersRead = resolve));
    const port = await serve(async (res) => {
      const sse = new SseWriter(res);
      sse.open({}, 10);
      // The frame waits until the client has read something: only the headers can have come.
      await clientHasHeaders;
      sse.send('{"late":true}');
      sse.done();
    });
    const client = await rawGet(port);
    client.socket.once('data', () => headersRead());
    await client.ended;
    // The headers came alone, before the frame.
    expect(client.reads[0]).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\n$/);
    expect(client.reads[0]).not.toContain('data:');
    expect(body(client.reads.join(''))).toBe('data: {"late":true}\n\ndata: [DONE]\n\n');
  });

  it('send returns a promise while the client does not read, and it resolves once the client reads', async () => {
    const frame = JSON.stringify({ pad: 'x'.repeat(64 * 1024) });
    let blockedAfter = -1;
    let released: Promise<void> | undefined;
    const port = await serve(async (res) => {
      const sse = new SseWriter(res);
      sse.open();
      for (let i = 0; i < 2_000; i++) {
        const wait = sse.send(frame);
        // The write happens at the end of the tick; the next send reports it.
        await new Promise((resolve) => setImmediate(resolve));
        const after = sse.send('{}');
        if (wait ?? after) {
          blockedAfter = i;
          released = wait ?? after;
          await released;
          break;
        }
      }
      sse.done();
    });
    const client = await rawGet(port);
    client.socket.pause();
    const started = performance.now();
    while (released === undefined && performance.now() - started < 5_000) await sleep(5);
    expect(blockedAfter).toBeGreaterThanOrEqual(0);
    let settled = false;
    void released!.then(() => (settled = true));
    await sleep(30);
    expect(settled).toBe(false);
    client.socket.resume();
    await client.ended;
    expect(settled).toBe(true);
    expect(body(client.reads.join('')).endsWith('data: {}\n\ndata: [DONE]\n\n')).toBe(true);
  });
});
