/**
 * `runtime worker --engine native --kv-host-cache-gb … --kv-disk-cache-dir …` behind
 * `runtime frontend`, as real processes, through the openai SDK: a prompt pushed out of a tiny
 * pool comes back from the tiers (cached tokens reported, same greedy tokens), its blocks are
 * files on disk, and after `kill -9` a new worker on the same directory serves the prompt from
 * G3 (the tier survives the restart) with the same tokens; the worker's /metrics shows it.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack, type CliWorker } from '../harness/cli-stack.js';

const BS = 16;
const tokens = (n: number, salt: number): number[] => Array.from({ length: n }, (_, i) => (i * 37 + salt * 101 + 5) % 250);
const PROMPT = tokens(10 * BS + 1, 1);
const FILLERS = [2, 3, 4].map((s) => tokens(14 * BS, s));

describe('native worker with KV tiers (CPU), end to end', () => {
  let stack: CliStack | undefined;
  let client: OpenAI;
  let diskDir: string;
  // Host tier of ~12 blocks (8 KiB each for this model), disk of ~1200, every block to disk.
  const tierArgs = (): string[] => ['--kv-host-cache-gb', '0.0001', '--kv-disk-cache-dir', diskDir, '--kv-disk-cache-gb', '0.01', '--kv-disk-min-reuse', '0'];
  const engineArgs = ['--engine', 'native', '--device', 'cpu', '--num-gpu-blocks', '24', '--threads', '1'];

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-kv-tiers-e2e-', model: 'qwen2-tiny', tiny: { arch: 'qwen2', seed: 3 }, leaseTtl: 2 });
    diskDir = join(stack.dir, 'g3');
    await stack.startFrontend();
    await stack.startWorker('agg', engineArgs, tierArgs());
    await stack.waitForRoutable(1, { timeoutMs: 45_000 });
    client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'x', maxRetries: 0 });
  }, 90_000);

  afterAll(async () => {
    await stack?.close();
  });

  async function complete(prompt: number[]): Promise<{ text: string; cached: number }> {
    const res = await client.completions.create({ model: 'qwen2-tiny', prompt, max_tokens: 6, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    const details = (res.usage as { prompt_tokens_details?: { cached_tokens?: number } } | undefined)?.prompt_tokens_details;
    return { text: res.choices[0]!.text, cached: details?.cached_tokens ?? -1 };
  }

  async function metric(worker: CliWorker, name: string, labels: string): Promise<number> {
    const text = await (await fetch(`${worker.statusUrl}/metrics`)).text();
    // A labelled counter appears once it has counted something.
    return Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  }

  /** Disk writes are asynchronous and a block is served only once written: wait for them. */
  async function diskSettled(worker: CliWorker): Promise<void> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const held = await metric(worker, 'tandem_worker_kv_tier_blocks', 'model_name="qwen2-tiny",tier="disk"');
      const written = await metric(worker, 'tandem_worker_kv_tier_offload_blocks_total', 'model_name="qwen2-tiny",tier="disk"');
      if (written >= held) return;
      if (Date.now() > deadline) throw new Error(`disk writes not settled: ${written} of ${held}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it('a prefix evicted from the pool comes back from the tiers; after kill -9 a new worker serves it from disk', async () => {
    const cold = await complete(PROMPT);
    expect(cold.cached).toBe(0);
    for (const f of FILLERS) await complete(f);
    await diskSettled(stack!.workers[0]!);
    const warm = await complete(PROMPT);
    expect(warm.text).toBe(cold.text);
    expect(warm.cached).toBe(10 * BS);
    const first = stack!.workers[0]!;
    const onboarded = (await metric(first, 'tandem_worker_kv_tier_onboard_blocks_total', 'model_name="qwen2-tiny",tier="host"')) + (await metric(first, 'tandem_worker_kv_tier_onboard_blocks_total', 'model_name="qwen2-tiny",tier="disk"'));
    expect(onboarded).toBe(10);
    // Push it out once more so its blocks go through the host tier onto the disk.
    for (const f of FILLERS) await complete(f.map((t) => (t + 1) % 250));
    await diskSettled(stack!.workers[0]!);
    const files = (await readdir(diskDir)).filter((n) => n.endsWith('.kvb'));
    expect(files.length).toBeGreaterThan(10);

    await stack!.kill9(first);
    const second = await stack!.startWorker('agg', engineArgs, tierArgs());
    await stack!.waitForRoutable(1, { timeoutMs: 45_000 });
    expect(await metric(second, 'tandem_worker_kv_tier_blocks', 'model_name="qwen2-tiny",tier="disk"')).toBeGreaterThan(10);
    const restarted = await complete(PROMPT);
    expect(restarted.text).toBe(cold.text);
    expect(restarted.cached).toBe(10 * BS);
    expect(await metric(second, 'tandem_worker_kv_tier_onboard_blocks_total', 'model_name="qwen2-tiny",tier="disk"')).toBe(10);
  }, 120_000);
});
