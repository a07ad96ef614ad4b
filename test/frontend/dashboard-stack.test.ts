/**
 * The dashboard of a real `runtime frontend` process (built CLI, `--router-mode kv`,
 * `--api-key`) in front of two real mocker workers (test/harness/cli-stack.ts):
 *   - `/dashboard/events` needs the key (header, ?api_key= or the cookie a page load or the
 *     page's key form sets); the page shell and its static files do not;
 *   - its snapshots list the workers of the aggregated pool, and a killed worker turns 'gone'
 *     once its lease expires;
 *   - a request id from the `x-request-id` header is found by the inspector, with timings;
 *   - the routing decision recorded for it names the worker the response header named, also
 *     when a standalone `runtime router` decides (its `router_decisions` on the event plane).
 * Needs `npm run build`.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { spawnCli, type Spawned } from '../harness/processes.js';
import type { DashboardSnapshot, RequestRecord } from '../../frontend/dashboard/snapshot.js';

const KEY = 'dash-secret-key';
const AUTH = { authorization: `Bearer ${KEY}` };

/** Reads `event: snapshot` frames from a live SSE response. */
class SnapshotReader {
  latest: DashboardSnapshot | undefined;
  frames = 0;
  retry: number | undefined;
  private buf = '';
  private readonly waiters = new Set<(s: DashboardSnapshot) => void>();

  constructor(readonly res: IncomingMessage) {
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      this.buf += chunk;
      let end: number;
      while ((end = this.buf.indexOf('\n\n')) !== -1) {
        const frame = this.buf.slice(0, end);
        this.buf = this.buf.slice(end + 2);
        const lines = frame.split('\n');
        const retry = lines.find((l) => l.startsWith('retry: '));
        if (retry) this.retry = Number(retry.slice('retry: '.length));
        const data = lines.find((l) => l.startsWith('data: '));
        if (lines.includes('event: snapshot') && data) {
          this.latest = JSON.parse(data.slice('data: '.length)) as DashboardSnapshot;
          this.frames++;
          for (const waiter of [...this.waiters]) waiter(this.latest);
        }
      }
    });
  }

  /**
   * The first value `find` gives for the latest snapshot or one of the next `frames` snapshots;
   * undefined once that many more arrived without it. Driven by the frames themselves (the
   * dashboard sends about one a second), never by a clock.
   */
  within<T>(frames: number, find: (s: DashboardSnapshot) => T | undefined): Promise<T | undefined> {
    const now = this.latest !== undefined ? find(this.latest) : undefined;
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve) => {
      let left = frames;
      const waiter = (s: DashboardSnapshot): void => {
        const found = find(s);
        if (found === undefined && --left > 0) return;
        this.waiters.delete(waiter);
        resolve(found);
      };
      this.waiters.add(waiter);
    });
  }

  close(): void {
    this.res.destroy();
  }
}

function openEvents(url: string, headers: Record<string, string> = {}, query = ''): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/dashboard/events${query}`, { headers }, resolve);
    req.on('error', reject);
    req.end();
  });
}

function aggregatedWorkers(s: DashboardSnapshot | undefined, model: string) {
  return s?.models.find((m) => m.name === model)?.pools.find((p) => p.role === 'aggregated')?.workers ?? [];
}

describe('dashboard on a real frontend and mocker fleet', () => {
  let stack: CliStack;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-dashboard-', leaseTtl: 2 });
    await stack.startWorker('agg', ['--engine', 'mocker']);
    await stack.startWorker('agg', ['--engine', 'mocker']);
    await stack.startFrontend(['--router-mode', 'kv', '--api-key', KEY]);
    await stack.waitForRoutable(2);
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
  });

  it('the stream and the page need the API key; ?api_key= and the cookie count', async () => {
    const none = await openEvents(stack.url);
    expect(none.statusCode).toBe(401);
    none.resume();
    const wrong = await openEvents(stack.url, {}, '?api_key=nope');
    expect(wrong.statusCode).toBe(401);
    wrong.resume();
    const byQuery = await openEvents(stack.url, {}, `?api_key=${KEY}`);
    expect(byQuery.statusCode).toBe(200);
    expect(byQuery.headers['content-type']).toMatch(/^text\/event-stream/);
    byQuery.destroy();

    expect((await fetch(`${stack.url}/dashboard/api/snapshot`)).status).toBe(401);
    const page = await fetch(`${stack.url}/dashboard?api_key=${KEY}`, { redirect: 'manual' });
    expect(page.status).toBe(303);
    expect(page.headers.get('location')).toBe('/dashboard');
    const cookie = page.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    const withCookie = await fetch(`${stack.url}/dashboard/api/snapshot`, { headers: { cookie: cookie.split(';')[0]! } });
    expect(withCookie.status).toBe(200);
    const html = await fetch(`${stack.url}/dashboard`, { headers: { cookie: cookie.split(';')[0]! } });
    expect(html.status).toBe(200);
    expect(html.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await html.text()).toMatch(/\/dashboard\/assets\//);
    // The shell and its files are open (no data in them; the page asks for the key), the data is not.
    const shell = await fetch(`${stack.url}/dashboard`);
    expect(shell.status).toBe(200);
    expect(await shell.text()).not.toContain(KEY);
    expect((await fetch(`${stack.url}/dashboard/assets/app.js`)).status).toBe(200);
    expect((await fetch(`${stack.url}/dashboard/api/requests/x`)).status).toBe(401);
    // The page's form: the key once as a header → the same HttpOnly cookie; a wrong key → 401.
    expect((await fetch(`${stack.url}/dashboard/session`, { method: 'POST', headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    const session = await fetch(`${stack.url}/dashboard/session`, { method: 'POST', headers: AUTH });
    expect(session.status).toBe(204);
    expect(session.headers.get('set-cookie')).toMatch(/^tandem_dashboard_key=.*; Path=\/dashboard; HttpOnly; SameSite=Strict$/);
    expect((await fetch(`${stack.url}/dashboard/session`, { headers: AUTH })).status).toBe(405);
    // The cookie is for /dashboard only: the OpenAI routes still want the header.
    expect((await fetch(`${stack.url}/v1/models`, { headers: { cookie: cookie.split(';')[0]! } })).status).toBe(401);
    // uPlot is served by the frontend itself.
    const uplot = await fetch(`${stack.url}/dashboard/assets/uPlot.iife.min.js`, { headers: AUTH });
    expect(uplot.status).toBe(200);
    expect(uplot.headers.get('content-type')).toMatch(/javascript/);
    expect((await uplot.text()).length).toBeGreaterThan(10_000);
  });

  it('snapshots list both workers of the aggregated pool, with load and kv totals', async () => {
    const reader = new SnapshotReader(await openEvents(stack.url, AUTH));
    try {
      expect(await reader.within(1, (snap) => snap)).toBeDefined();
      expect(reader.retry).toBeGreaterThan(0);
      const workers = aggregatedWorkers(reader.latest, stack.model);
      expect(workers.map((w) => w.instanceId).sort()).toEqual(stack.workers.map((w) => w.instanceId).sort());
      expect(workers.every((w) => w.state === 'ready' && w.kvTotalBlocks > 0)).toBe(true);
      expect(reader.latest!.routing.mode).toBe('kv');
      // About 1 Hz: a second frame comes.
      await reader.within(2, () => undefined);
      expect(reader.frames).toBeGreaterThanOrEqual(2);
    } finally {
      reader.close();
    }
  });

  it('the inspector finds a request by its x-request-id, and its routing decision names the header worker', async () => {
    const ids: Array<{ id: string; worker: string }> = [];
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...AUTH },
        body: JSON.stringify({ model: stack.model, messages: [{ role: 'user', content: `the same long shared prefix for every request ${'x'.repeat(200)} ${i}` }], max_tokens: 8, stream: i % 2 === 0 }),
      });
      expect(res.status).toBe(200);
      await res.text();
      ids.push({ id: res.headers.get('x-request-id')!, worker: res.headers.get('x-worker-instance-id')! });
    }
    for (const { id, worker } of ids) {
      const res = await fetch(`${stack.url}/dashboard/api/requests/${id}`, { headers: AUTH });
      expect(res.status).toBe(200);
      const record = (await res.json()) as RequestRecord;
      expect(record.requestId).toBe(id);
      expect(record.workers).toEqual([worker]);
      expect(record.finishReason).toBe('length');
      expect(record.completionTokens).toBe(8);
      expect(record.timings.ttftMs).not.toBeNull();
      expect(record.timings.totalMs).toBeGreaterThanOrEqual(record.timings.ttftMs!);
      // kv mode: the embedded router's decision, with every candidate's cost.
      expect(record.routing?.winner).toBe(worker);
      expect(record.routing?.candidates.map((c) => c.instanceId).sort()).toEqual(stack.workers.map((w) => w.instanceId).sort());
      expect(record.routing?.candidates.every((c) => typeof c.cost === 'number')).toBe(true);
    }
    const snap = (await (await fetch(`${stack.url}/dashboard/api/snapshot`, { headers: AUTH })).json()) as DashboardSnapshot;
    const decision = snap.routing.decisions.find((d) => d.requestId === ids[3]!.id);
    expect(decision?.winner).toBe(ids[3]!.worker);
    expect(snap.traffic.requestsTotal).toBeGreaterThanOrEqual(4);
    expect((await fetch(`${stack.url}/dashboard/api/requests/chatcmpl-unknown`, { headers: AUTH })).status).toBe(404);
  });

  it('a killed worker is marked gone within the lease TTL', async () => {
    const reader = new SnapshotReader(await openEvents(stack.url, AUTH));
    try {
      const victim = stack.workers[1]!;
      await stack.kill9(victim);
      // Lease TTL 2 s, about two snapshots; bound generously, in frames, for a loaded machine.
      const gone = await reader.within(30, (snap) => (aggregatedWorkers(snap, stack.model).find((w) => w.instanceId === victim.instanceId)?.state === 'gone' ? true : undefined));
      expect(gone, 'the killed worker gone within 30 snapshots').toBe(true);
      const survivor = aggregatedWorkers(reader.latest, stack.model).find((w) => w.instanceId === stack.workers[0]!.instanceId);
      expect(survivor?.state).toBe('ready');
    } finally {
      reader.close();
    }
  });
});

describe('dashboard with a standalone router', () => {
  let stack: CliStack;
  let router: Spawned | undefined;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-dashboard-router-', leaseTtl: 2 });
    await stack.startWorker('agg', ['--engine', 'mocker']);
    await stack.startWorker('agg', ['--engine', 'mocker']);
    router = spawnCli(['router', ...stack.common, '--worker-component', 'backend']);
    await router.waitForLine(/^router ready /, 60_000);
    await stack.startFrontend(['--router-mode', 'kv', '--router-endpoint', 'router']);
    await stack.waitForRoutable(2);
  }, 120_000);
  afterAll(async () => {
    await router?.stop(10_000);
    await stack?.close();
  });

  it("the router's published decision reaches the dashboard and names the header's worker", async () => {
    // The frontend hears `router_decisions` once its event-plane stream to the router is open; a
    // decision published before that (a loaded box may take seconds) is not kept for it. So the
    // test sends requests until one's decision arrives, each given three dashboard snapshots
    // after its response, and checks that decision: waits by the SSE stream's frames, no clock.
    const reader = new SnapshotReader(await openEvents(stack.url));
    try {
      let seen: { id: string; worker: string; decision: DashboardSnapshot['routing']['decisions'][number] } | undefined;
      for (let attempt = 0; seen === undefined; attempt++) {
        expect(attempt, 'no request of 20 had its router decision reach the dashboard').toBeLessThan(20);
        const res = await fetch(`${stack.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: stack.model, prompt: `a prompt for the standalone router ${'y'.repeat(100)} ${attempt}`, max_tokens: 4 }),
        });
        expect(res.status).toBe(200);
        await res.text();
        const id = res.headers.get('x-request-id')!;
        const worker = res.headers.get('x-worker-instance-id')!;
        const record = (await (await fetch(`${stack.url}/dashboard/api/requests/${id}`)).json()) as RequestRecord;
        expect(record.workers).toEqual([worker]);
        const decision = await reader.within(3, (snap) => snap.routing.decisions.find((d) => d.requestId === id && d.decidedBy !== 'frontend'));
        if (decision) seen = { id, worker, decision };
      }
      expect(seen.decision.winner).toBe(seen.worker);
      expect(seen.decision.decidedBy).not.toBe('frontend');
      expect(seen.decision.candidates.map((c) => c.instanceId).sort()).toEqual(stack.workers.map((w) => w.instanceId).sort());
    } finally {
      reader.close();
    }
  }, 120_000);
});
