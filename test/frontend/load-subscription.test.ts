/**
 * A frontend in kv mode reads the workers' `load_metrics` in two places, its embedded KV router
 * and its dashboard, through one subscription per worker component (router/adapters/load-feed.ts).
 * Counted where it cannot be faked: the subscriptions a real nats-server lists on its
 * monitoring endpoint. Both readers must still hear the reports.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import type { DashboardSnapshot } from '../../frontend/dashboard/index.js';
import { KvRouterHub } from '../../router/adapters/index.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { startWorker, type RunningWorker } from '../../workers/process/worker-process.js';
import { startNats, type NatsHarness } from '../harness/nats.js';
import { waitFor } from './harness.js';

const SUBJECT = 'tandem.tandem.backend.load_metrics';

async function loadSubscriptions(nats: NatsHarness): Promise<number> {
  const res = await fetch(`${nats.monitorUrl}/subsz?subs=1&limit=1024`);
  const body = (await res.json()) as { subscriptions_list?: { subject: string }[] };
  return (body.subscriptions_list ?? []).filter((s) => s.subject === SUBJECT).length;
}

describe('frontend --router-mode kv over NATS: one load_metrics subscription', () => {
  const store = new MemoryDiscoveryStore();
  const runtimes: DistributedRuntime[] = [];
  let nats: NatsHarness;
  let dir: string;
  let worker: RunningWorker;
  let frontend: FrontendHandle;

  const runtime = async (name: string) => {
    const rt = await DistributedRuntime.create({ name, discovery: 'memory', eventPlane: 'nats', natsServer: nats.url, memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
    runtimes.push(rt);
    return rt;
  };

  beforeAll(async () => {
    nats = await startNats({ monitor: true });
    dir = await mkdtemp(join(tmpdir(), 'tandem-load-sub-'));
    await makeTinyModel({ arch: 'llama', outDir: join(dir, 'tiny') });
    worker = await startWorker(await runtime('worker'), {
      engine: 'mocker', modelDir: join(dir, 'tiny'), mode: 'agg', namespace: 'tandem', blockSize: 16, numGpuBlocks: 512,
      maxNumBatchedTokens: 8192, maxNumSeqs: 256, speedupRatio: 100, device: 'cpu', loadMetricsIntervalMs: 10,
    });
    frontend = await startFrontend({ runtime: await runtime('frontend'), host: '127.0.0.1', httpPort: 0, routerMode: 'kv' });
    await waitFor(() => frontend.models.model('tiny')?.candidates().length === 1, 10_000);
  }, 60_000);

  afterAll(async () => {
    await frontend?.close();
    await worker?.close();
    for (const rt of runtimes) await rt.shutdown();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('after a routed request (router started) and with the dashboard following the card: exactly 1 load_metrics subscription, and the dashboard hears the reports', async () => {
    const client = new OpenAI({ baseURL: `${frontend.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await client.completions.create({ model: 'tiny', prompt: 'one subscription is enough', max_tokens: 8 });
    // The dashboard hears reports (an idle worker's heartbeat comes about every second).
    await waitFor(() => {
      const w = (frontend.dashboard!.state.view(Date.now()) as DashboardSnapshot).models[0]?.pools[0]?.workers[0];
      return w?.loadFresh === true;
    }, 5_000);
    expect(await loadSubscriptions(nats)).toBe(1);
  });

  it("a KV router service reads its reports through the hub's feed: a current report of the idle worker arrives", async () => {
    const hub = await KvRouterHub.start(await runtime('router'), { namespace: 'tandem' });
    try {
      const service = await hub.service('backend', 16);
      await waitFor(() => service.workers().length === 1, 5_000);
      await waitFor(() => service.reportedLoad(worker.card.instanceId) !== undefined, 5_000);
      expect(service.reportedLoad(worker.card.instanceId)).toMatchObject({ numRunning: 0, numWaiting: 0 });
      expect(hub.loads.components()).toEqual(['backend']);
      expect(await loadSubscriptions(nats)).toBe(2); // the frontend's one and this process's one
    } finally {
      await hub.close();
    }
  });
});
