/**
 * LoRA adapters on a mixture-of-experts model are out of scope (adapters on experts), and the
 * worker says so up front: a CPU worker serving a tiny Qwen3-MoE publishes `supportsLora: false`
 * on its card, so a run-time load is answered 400 naming why, by the frontend, without calling a
 * worker that would refuse. Before, the card claimed adapters, the worker refused the load with
 * `unavailable`, and the client got a retryable 503. Real processes of the built CLI. (`--lora`
 * at start: test/native/moe-refusals-cli.test.ts.)
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { CliStack, type CliWorker } from '../harness/cli-stack.js';

describe.skipIf(!isNativeBuilt())('a CPU worker serving a mixture-of-experts model', () => {
  let stack: CliStack;
  let worker: CliWorker;
  let adapter: string;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-lora-moe-', model: 'moe', tiny: { arch: 'qwen3_moe', dtype: 'f32' } });
    adapter = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(stack.dir, 'adapters', 'sql'), rank: 4 });
    await stack.startFrontend();
    worker = await stack.startWorker('agg', ['--engine', 'native', '--threads', '1', '--num-gpu-blocks', '64', '--device', 'cpu']);
    await stack.waitForRoutable(1);
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
  }, 60_000);

  it('says on its card that it takes no adapters; a load is 400 naming why, and base requests are served', async () => {
    expect((await stack.cardOf(worker)).supportsLora).toBe(false);
    const r = await fetch(`${stack.url}/v1/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'sql', lora_path: adapter }) });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/runs LoRA adapters/);
    expect(worker.proc.output()).not.toContain('LoRA adapter load started');
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const done = await client.completions.create({ model: 'moe', prompt: 'base', max_tokens: 2 });
    expect(done.choices[0]!.text.length).toBeGreaterThanOrEqual(0);
    expect(done.usage?.completion_tokens).toBe(2);
  }, 60_000);
});
