/**
 * A worker on the CUDA backend refuses adapters (no LoRA kernels yet). Here it runs as
 * `--device simt` (the CUDA backend's own code on the host), beside a CPU worker, as real
 * processes of the built CLI: its card says `supportsLora: false`, a run-time load skips it,
 * every adapter request goes to the CPU worker while base requests go to both, and a fleet of
 * only such workers answers a load with 400 naming why. On a GPU the same holds for `--device
 * cuda`; scripts/device/serve-check.mjs checks the refusal there.
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { CliStack, type CliWorker } from '../harness/cli-stack.js';
import { metricValue, pollUntil, scrape } from '../harness/http.js';

const NATIVE = ['--engine', 'native', '--threads', '1', '--num-gpu-blocks', '64'];

async function requests(w: CliWorker): Promise<number> {
  return metricValue(await scrape(w.statusUrl), 'tandem_worker_requests_total') ?? 0;
}


describe.skipIf(!isNativeBuilt())('a worker whose engine refuses adapters (--device simt, the CUDA backend on the host)', () => {
  let stack: CliStack;
  let gpu: CliWorker;
  let cpu: CliWorker;
  let adapter: string;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-lora-device-', model: 'tiny' });
    adapter = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(stack.dir, 'adapters', 'sql'), rank: 4 });
    await stack.startFrontend();
    gpu = await stack.startWorker('agg', [...NATIVE, '--device', 'simt']);
    cpu = await stack.startWorker('agg', [...NATIVE, '--device', 'cpu']);
    await stack.waitForRoutable(2);
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
  }, 60_000);

  it('its card says so; a load skips it; adapter requests go only to the CPU worker, base requests to both', async () => {
    expect((await stack.cardOf(gpu)).supportsLora).toBe(false);
    expect((await stack.cardOf(cpu)).supportsLora).toBe(true);
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const loaded = await fetch(`${stack.url}/v1/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'sql', lora_path: adapter }) });
    expect(loaded.status).toBe(200);
    expect(gpu.proc.output()).not.toContain('LoRA adapter load started');
    expect((await stack.cardOf(cpu)).loras?.map((l) => l.name)).toEqual(['sql']);
    const before = { gpu: await requests(gpu), cpu: await requests(cpu) };
    for (let i = 0; i < 6; i++) await client.completions.create({ model: 'sql', prompt: `adapter ${i}`, max_tokens: 2 });
    expect((await requests(gpu)) - before.gpu).toBe(0);
    expect((await requests(cpu)) - before.cpu).toBe(6);
    for (let i = 0; i < 6; i++) await client.completions.create({ model: 'tiny', prompt: `base ${i}`, max_tokens: 2 });
    expect((await requests(gpu)) - before.gpu).toBeGreaterThan(0);
  }, 120_000);

  it('with only such workers left, a load is refused with 400 naming why', async () => {
    await stack.kill9(cpu);
    // Its card leaves discovery when its lease expires (--lease-ttl 2).
    await pollUntil('the killed worker\'s card to expire', async () => (await stack.cardOf(cpu).then(() => false, () => true)), 20_000);
    await stack.waitForRoutable(1, { timeoutMs: 20_000 });
    const r = await fetch(`${stack.url}/v1/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'chat', lora_path: adapter }) });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/runs LoRA adapters/);
  }, 60_000);
});
