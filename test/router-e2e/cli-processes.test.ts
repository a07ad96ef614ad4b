/**
 * The command line as an operator runs it, all real processes from source (tsx): two
 * `runtime worker --engine mocker`, one `runtime router --worker-component backend`, and
 * `runtime frontend --router-mode kv --router-endpoint router`, sharing file discovery.
 * A repeated prompt lands on the worker that cached it, reports that worker's reuse in
 * `cached_tokens`, and the replica counts its decisions in `tandem_router_decisions_total`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTs, type Spawned } from '../harness/processes.js';
import { metricValue, scrape } from '../harness/http.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { BLOCK, MODEL, tokens, waitFor } from './stack.js';

const CLI = 'test/router-e2e/fixtures/cli.ts';

describe('runtime router + runtime frontend --router-mode kv --router-endpoint router', () => {
  let dir: string;
  const procs: Spawned[] = [];
  let url = '';
  let routerStatus = '';

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-router-cli-'));
    await makeTinyModel({ arch: 'llama', outDir: join(dir, MODEL) });
    const common = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '2', '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'info'];
    const spawn = (args: string[]) => {
      const p = spawnTs(CLI, args);
      procs.push(p);
      return p;
    };
    const workers = [0, 1].map(() => spawn(['worker', ...common, '--engine', 'mocker', '--model', join(dir, MODEL), '--speedup-ratio', '1000', '--num-gpu-blocks', '512']));
    const router = spawn(['router', ...common, '--status-port', '0', '--worker-component', 'backend', '--block-size', String(BLOCK)]);
    const frontend = spawn(['frontend', ...common, '--http-port', '0', '--router-mode', 'kv', '--router-endpoint', 'router']);
    await Promise.all(workers.map((w) => w.waitForLine(/"msg":"worker ready"/, 60_000)));
    routerStatus = (JSON.parse(await router.waitForLine(/"msg":"status server listening"/, 60_000)) as { url: string }).url;
    await router.waitForLine(/^router ready /, 60_000);
    url = (await frontend.waitForLine(/^frontend listening on http:\/\//, 60_000)).slice('frontend listening on '.length).trim();
    await waitFor('2 routable workers', async () => {
      const body = (await (await fetch(`${url}/health`)).json()) as { models: Array<{ name: string; instances: number }> };
      return body.models.find((m) => m.name === MODEL)?.instances === 2;
    }, 20_000, 100);
  }, 90_000);

  afterAll(async () => {
    for (const p of procs) {
      if (p.running) p.kill('SIGTERM');
    }
    await Promise.all(
      procs.map(async (p) => {
        const t = setTimeout(() => p.kill('SIGKILL'), 10_000);
        await p.exited();
        clearTimeout(t);
      }),
    );
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('routes a repeated prompt to the caching worker through the router replica', async () => {
    const prompt = tokens(77, 8 * BLOCK + 3);
    const send = async () => {
      const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt, max_tokens: 4, ignore_eos: true }) });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
      return { instance: res.headers.get('x-worker-instance-id'), cached: body.usage.prompt_tokens_details.cached_tokens };
    };
    const first = await send();
    expect(first.cached).toBe(0);
    // The replica learns of the blocks from the worker's KV events.
    await waitFor('replica indexed the prompt', async () => (metricValue(await scrape(routerStatus), 'tandem_router_index_blocks', { component: 'backend' }) ?? 0) >= 8, 10_000, 100);
    const second = await send();
    expect(second.instance).toBe(first.instance);
    expect(second.cached).toBe(8 * BLOCK);
    const metrics = await scrape(routerStatus);
    expect(metricValue(metrics, 'tandem_router_decisions_total', { component: 'backend', result: 'routed' })).toBe(2);
    expect(metricValue(metrics, 'tandem_router_workers', { component: 'backend' })).toBe(2);
  });
});
