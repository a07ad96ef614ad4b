/**
 * Connection hygiene of a real `runtime frontend` process, over raw sockets: a client that
 * trickles its body or its headers is cut (408) after --http-request-timeout /
 * --http-header-timeout, while a streaming response that outlives those timeouts is not; idle
 * keep-alive sockets close after --http-idle-timeout; past --max-connections a connection may
 * only probe (/live, /health, within --max-probe-connections) while the first ones keep
 * working, so 60 clients trickling their bodies at a cap of 50 do not make /live time out; a
 * 64 KB header gets 431.
 * Needs `npm run build`.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { pollUntil, readSse } from '../harness/http.js';

/** A raw client socket that keeps everything it receives and notes when it closed. */
interface RawClient {
  socket: Socket;
  received(): string;
  closed: Promise<{ afterMs: number; error?: string }>;
}

function rawClient(url: string): Promise<RawClient> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let data = '';
    let error: string | undefined;
    const openedAt = Date.now();
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (data += chunk));
    socket.on('error', (err: NodeJS.ErrnoException) => (error = err.code ?? err.message));
    const closed = new Promise<{ afterMs: number; error?: string }>((done) => socket.on('close', () => done({ afterMs: Date.now() - openedAt, ...(error ? { error } : {}) })));
    socket.once('connect', () => resolve({ socket, received: () => data, closed }));
    socket.once('error', reject);
  });
}

/** Send one keep-alive GET and wait for its whole (content-length) response. */
async function getOn(client: RawClient, path: string, extraHeaders = ''): Promise<string> {
  const before = client.received().length;
  client.socket.write(`GET ${path} HTTP/1.1\r\nhost: x\r\n${extraHeaders}\r\n`);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const text = client.received().slice(before);
    const head = text.indexOf('\r\n\r\n');
    const length = /content-length: (\d+)/i.exec(text)?.[1];
    if (head >= 0 && length !== undefined && text.length >= head + 4 + Number(length)) return text;
    if (client.socket.destroyed || Date.now() > deadline) throw new Error(`no whole response to GET ${path}: ${JSON.stringify(text.slice(0, 200))}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * n connections that hold ordinary slots. The server may not have seen an earlier test's sockets
 * close yet; a connection it put on the probe budget answers /v1/models with 503 and closes, so
 * start again until all n are ordinary.
 */
async function holdOrdinarySlots(url: string, n: number): Promise<RawClient[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const held = await Promise.all(Array.from({ length: n }, () => rawClient(url)));
    const statuses = [];
    for (const client of held) statuses.push(statusOf(await getOn(client, '/v1/models').catch(() => '')));
    if (statuses.every((s) => s === 200)) return held;
    for (const client of held) client.socket.destroy();
    if (Date.now() > deadline) throw new Error(`no ${n} ordinary slots within 10 s: ${statuses.join(', ')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function statusOf(response: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1]);
}

/** Write `piece` every `everyMs` until the socket closes; returns how many pieces went out. */
function trickle(client: RawClient, piece: string, everyMs: number): { sent: () => number; stop: () => void } {
  let sent = 0;
  const timer = setInterval(() => {
    if (client.socket.destroyed) return clearInterval(timer);
    client.socket.write(piece);
    sent += 1;
  }, everyMs);
  return { sent: () => sent, stop: () => clearInterval(timer) };
}

describe('frontend connection limits (real process, raw sockets)', () => {
  let stack: CliStack;
  let capped: string;
  let tight: string;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-conn-limits-' });
    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '1']);
    await stack.startFrontend(['--http-header-timeout', '1', '--http-request-timeout', '2', '--http-idle-timeout', '1']);
    const second = await stack.startFrontend(['--max-connections', '3', '--max-probe-connections', '2']);
    capped = (await second.waitForLine(/^frontend listening on http:\/\//)).slice('frontend listening on '.length).trim();
    const third = await stack.startFrontend(['--max-connections', '50']);
    tight = (await third.waitForLine(/^frontend listening on http:\/\//)).slice('frontend listening on '.length).trim();
    await stack.waitForRoutable(1);
  }, 120_000);
  afterAll(async () => stack?.close());

  it('cuts a body sent one byte at a time (slowloris) with 408 after --http-request-timeout', async () => {
    const client = await rawClient(stack.url);
    // 200 bytes at one per 250 ms would take 50 s.
    client.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{`);
    const slow = trickle(client, ' ', 250);
    const closed = await client.closed;
    slow.stop();
    expect(statusOf(client.received())).toBe(408);
    expect(client.received()).toContain('"code":"request_timeout"');
    expect(slow.sent()).toBeLessThan(199);
    // 2 s timeout, checked every second: cut long before the body could have arrived.
    expect(closed.afterMs).toBeLessThan(20_000);
  }, 30_000);

  it('cuts headers sent one line at a time with 408 after --http-header-timeout', async () => {
    const client = await rawClient(stack.url);
    client.socket.write('GET /live HTTP/1.1\r\nhost: x\r\n');
    const slow = trickle(client, 'x-slow: 1\r\n', 250);
    const closed = await client.closed;
    slow.stop();
    expect(statusOf(client.received())).toBe(408);
    expect(closed.afterMs).toBeLessThan(20_000);
  }, 30_000);

  it('does not cut a streaming response that runs longer than the request timeout', async () => {
    const startedAt = Date.now();
    const res = await fetch(`${stack.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: stack.model, prompt: 'Once upon a time', max_tokens: 1000, ignore_eos: true, stream: true }),
    });
    expect(res.status).toBe(200);
    const result = await readSse(res);
    const elapsedMs = Date.now() - startedAt;
    expect(result.done).toBe(true);
    expect(result.chunks.some((c) => 'error' in c)).toBe(false);
    const finish = result.chunks.flatMap((c) => (c.choices as Array<{ finish_reason: string | null }>) ?? []).find((c) => c.finish_reason !== null);
    expect(finish?.finish_reason).toBe('length');
    // The point of the test: the stream outlived the 2 s request timeout plus its 1 s check.
    expect(elapsedMs).toBeGreaterThan(3_500);
  }, 60_000);

  it('closes an idle keep-alive connection after --http-idle-timeout', async () => {
    const client = await rawClient(stack.url);
    expect(statusOf(await getOn(client, '/live'))).toBe(200);
    const closed = await client.closed;
    expect(closed.afterMs).toBeLessThan(15_000);
  }, 30_000);

  it('answers a 64 KB header with 431 in OpenAI error shape, and an 8 KB one normally', async () => {
    const big = await rawClient(stack.url);
    big.socket.write(`GET /live HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(64 * 1024)}\r\n\r\n`);
    await big.closed;
    expect(statusOf(big.received())).toBe(431);
    const body = JSON.parse(big.received().slice(big.received().indexOf('\r\n\r\n') + 4)) as { error: { code: string; type: string } };
    expect(body.error).toMatchObject({ code: 'headers_too_large', type: 'invalid_request_error' });

    const fine = await rawClient(stack.url);
    expect(statusOf(await getOn(fine, '/live', `x-big: ${'a'.repeat(8 * 1024)}\r\n`))).toBe(200);
    fine.socket.destroy();
  }, 30_000);

  it('past --max-connections a connection may only probe: /live answers (and closes), anything else is 503 overloaded; the first ones keep working', async () => {
    const held = await Promise.all([0, 1, 2].map(() => rawClient(capped)));
    for (const client of held) expect(statusOf(await getOn(client, '/live'))).toBe(200);

    // The probe budget: /live and /health answer, with connection: close.
    for (const path of ['/live', '/health']) {
      const probe = await rawClient(capped);
      const answer = await getOn(probe, path);
      expect(statusOf(answer), path).toBe(200);
      expect(answer.toLowerCase()).toContain('connection: close');
      await probe.closed;
    }
    // Anything else on such a connection is refused, with Retry-After, and the socket closed.
    const other = await rawClient(capped);
    const refused = await getOn(other, '/v1/models');
    expect(statusOf(refused)).toBe(503);
    expect(refused.toLowerCase()).toContain('retry-after:');
    expect(refused).toContain('"code":"overloaded"');
    await other.closed;
    for (const client of held) expect(statusOf(await getOn(client, '/v1/models'))).toBe(200);

    // A freed ordinary slot is usable again, for anything.
    held[0]!.socket.destroy();
    await held[0]!.closed;
    await new Promise((r) => setTimeout(r, 200));
    const again = await rawClient(capped);
    expect(statusOf(await getOn(again, '/v1/models'))).toBe(200);
    for (const client of [...held.slice(1), again]) client.socket.destroy();
  }, 30_000);

  it('a full probe budget makes room by closing its oldest connection that sent nothing; a silent probe connection is closed after its head timeout', async () => {
    const held = await holdOrdinarySlots(capped, 3);
    for (const client of held) expect(statusOf(await getOn(client, '/live'))).toBe(200);
    // --max-probe-connections 2: two silent connections fill it.
    const silent = [await rawClient(capped), await rawClient(capped)];
    await new Promise((r) => setTimeout(r, 100));
    const probe = await rawClient(capped);
    expect(statusOf(await getOn(probe, '/live'))).toBe(200);
    // The oldest silent one made room, closed without a byte.
    await silent[0]!.closed;
    expect(silent[0]!.received()).toBe('');
    // The other is closed by the head timeout (PROBE_HEAD_TIMEOUT_MS), also without a byte.
    await silent[1]!.closed;
    expect(silent[1]!.received()).toBe('');
    for (const client of held) client.socket.destroy();
  }, 30_000);

  it('60 clients trickling their bodies at --max-connections 50: /live and /health still answer at once (issue 34, 1.8)', async () => {
    const slow = await Promise.all(Array.from({ length: 60 }, () => rawClient(tight)));
    for (const c of slow) c.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{`);
    // The 10 past the cap were on the probe budget: their POST is refused and they are closed.
    await pollUntil('10 slow clients past the cap refused', () => slow.filter((c) => c.socket.destroyed).length === 10, 10_000);
    for (const c of slow.filter((c) => c.socket.destroyed)) expect(statusOf(c.received())).toBe(503);
    for (const path of ['/live', '/health']) {
      const res = await fetch(`${tight}${path}`, { signal: AbortSignal.timeout(10_000) });
      expect(res.status, path).toBe(200);
    }
    // The 50 still hold their slots: an ordinary request waits for one, a probe does not.
    expect(slow.filter((c) => !c.socket.destroyed)).toHaveLength(50);
    expect((await fetch(`${tight}/v1/models`)).status).toBe(503);
    for (const c of slow) c.socket.destroy();
    await pollUntil('the slots are free again', async () => (await fetch(`${tight}/v1/models`).catch(() => undefined))?.status === 200, 10_000);
  }, 60_000);
});
