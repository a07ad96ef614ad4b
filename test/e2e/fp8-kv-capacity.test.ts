/**
 * An FP8 KV cache holds twice the blocks in the same memory, and the fleet sees it: two mocker
 * workers with the same `--kv-cache-memory`, one `--kv-cache-dtype bf16` and one `fp8`, as real
 * processes behind a KV-mode frontend. Their model cards carry 2× the `totalKvBlocks` for the
 * e4m3 pool, the frontend's fleet view (the dashboard snapshot, fed by the same cards the router
 * books against and the planner sizes from) shows the same, and the latency router, pricing a
 * request on the idle fleet, predicts the fp8 worker the lower ITL (the prompt's blocks are a
 * smaller share of its pool) and sends the request there. The arithmetic is
 * test/workers/mocker-kv-capacity.test.ts's; this checks it reaches the fleet.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack, type CliWorker } from '../harness/cli-stack.js';

describe('FP8 KV capacity reaches the fleet (mocker workers, real processes)', () => {
  let stack: CliStack;
  let bf16: CliWorker;
  let fp8: CliWorker;
  const memory = String(4 << 20);

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-fp8-kv-' });
    await stack.startFrontend(['--router-mode', 'kv', '--router-cost', 'latency']);
    bf16 = await stack.startWorker('agg', ['--engine', 'mocker', '--kv-cache-memory', memory, '--kv-cache-dtype', 'bf16']);
    fp8 = await stack.startWorker('agg', ['--engine', 'mocker', '--kv-cache-memory', memory, '--kv-cache-dtype', 'fp8']);
    await stack.waitForRoutable(2);
  }, 90_000);
  afterAll(async () => {
    await stack?.close();
  }, 60_000);

  it('the fp8 worker card, the frontend fleet view and the router see twice the blocks', async () => {
    const [a, b] = [await stack.cardOf(bf16), await stack.cardOf(fp8)];
    expect(a.totalKvBlocks).toBeGreaterThan(0);
    expect(b.totalKvBlocks).toBe(2 * a.totalKvBlocks);

    const snap = (await (await fetch(`${stack.url}/dashboard/api/snapshot`)).json()) as { models: Array<{ name: string; pools: Array<{ role: string; workers: Array<{ instanceId: string; kvTotalBlocks: number }> }> }> };
    const workers = snap.models.find((m) => m.name === stack.model)!.pools.flatMap((p) => p.workers);
    const total = (w: CliWorker) => workers.find((x) => x.instanceId === w.instanceId)!.kvTotalBlocks;
    expect(total(bf16)).toBe(a.totalKvBlocks);
    expect(total(fp8)).toBe(b.totalKvBlocks);

    const res = await fetch(`${stack.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: stack.model, prompt: 'pool '.repeat(120), max_tokens: 2 }) });
    expect(res.status).toBe(200);
    const after = (await (await fetch(`${stack.url}/dashboard/api/snapshot`)).json()) as { routing: { decisions: Array<{ winner: string; candidates: Array<{ instanceId: string; predictedItlMs?: number }> }> } };
    const decision = after.routing.decisions[after.routing.decisions.length - 1]!;
    const itl = (w: CliWorker) => decision.candidates.find((c) => c.instanceId === w.instanceId)!.predictedItlMs!;
    expect(itl(fp8)).toBeLessThan(itl(bf16));
    expect(decision.winner).toBe(fp8.instanceId);
  });
});
