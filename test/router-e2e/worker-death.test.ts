/**
 * Worker death with real processes: two `runtime worker --engine mocker` processes (from
 * source) and a KV router service in this process share file discovery with a 2 s lease.
 * After kill -9 of one worker its blocks leave the router's index once its instance expires,
 * and the survivor's blocks stay.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { KvRouterService } from '../../router/adapters/kv-router-service.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { spawnTs, type Spawned } from '../harness/processes.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { BLOCK, tokens, waitFor } from './stack.js';

const CLI = 'test/router-e2e/fixtures/cli.ts';

describe('KV router: a killed worker leaves the index when its instance expires', () => {
  let dir: string;
  let rt: DistributedRuntime;
  let svc: KvRouterService;
  const procs: Array<{ proc: Spawned; id: string }> = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-router-death-'));
    await makeTinyModel({ arch: 'llama', outDir: join(dir, 'tiny') });
    const common = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '2', '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'info'];
    const started = [0, 1].map(async () => {
      const proc = spawnTs(CLI, ['worker', ...common, '--engine', 'mocker', '--model', join(dir, 'tiny'), '--speedup-ratio', '1000', '--num-gpu-blocks', '512']);
      const ready = await proc.waitForLine(/"msg":"worker ready"/, 60_000);
      procs.push({ proc, id: (JSON.parse(ready) as { instanceId: string }).instanceId });
    });
    await Promise.all(started);
    rt = await DistributedRuntime.create({ name: 'router', discovery: 'file', discoveryDir: join(dir, 'discovery'), leaseTtlSeconds: 2, eventPlane: 'direct', host: '127.0.0.1', logLevel: 'silent' });
    svc = await KvRouterService.start(rt, { namespace: 'tandem', component: 'backend', blockSize: BLOCK, tickIntervalMs: 50 });
    await waitFor('both workers followed', () => svc.workers().length === 2, 15_000);
  }, 90_000);

  afterAll(async () => {
    await svc?.close();
    await rt?.shutdown();
    for (const { proc } of procs) {
      proc.kill('SIGKILL');
      await proc.exited();
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('kill -9: blocks leave the index after the lease TTL, the survivor keeps its blocks', async () => {
    const client = await rt.namespace('tandem').component('backend').endpoint('generate').client();
    await client.waitForInstances(2);
    const send = async (id: string, seed: number) => {
      const req: PreprocessedRequest = { requestId: `d${seed}`, model: 'tiny', tokenIds: tokens(seed, 6 * BLOCK), sampling: {}, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
      for await (const _ of client.generate<PreprocessedRequest, TokenDelta>(req, { routing: { mode: 'direct', instanceId: id } }));
    };
    const [victim, survivor] = procs;
    await send(victim!.id, 1);
    await send(survivor!.id, 2);
    client.close();
    await waitFor('both indexed', () => svc.blocksOf(victim!.id).length >= 6 && svc.blocksOf(survivor!.id).length >= 6, 10_000);
    const survivorBlocks = svc.blocksOf(survivor!.id).sort();

    const killedAt = Date.now();
    victim!.proc.kill('SIGKILL');
    await victim!.proc.exited();
    await waitFor('victim dropped from the index', () => !svc.workers().includes(victim!.id) && svc.blocksOf(victim!.id).length === 0, 15_000);
    // Not before its lease could expire: the router learns of the death from discovery.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(1000);
    expect(svc.router.stats().index.perWorker[victim!.id]).toBeUndefined();
    expect(svc.blocksOf(survivor!.id).sort()).toEqual(survivorBlocks);
    // The victim's prefix no longer attracts requests: it routes on load alone.
    const r = svc.route({ requestId: 'after', tokens: tokens(1, 6 * BLOCK) });
    expect(r.kind === 'routed' && r.decision.instanceId).toBe(survivor!.id);
    expect(r.kind === 'routed' && r.decision.overlapBlocks).toBe(0);
  });
});
