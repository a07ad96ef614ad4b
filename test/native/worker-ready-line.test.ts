/**
 * An operator reads what a worker serves from its `worker ready` line: an FP8 checkpoint with an
 * FP8 KV cache says the weights' scheme (`quantization`) and the KV dtype (`kvDtype`), beside
 * the device description; a bf16 model with the default KV cache says neither FP8. A worker that
 * speculates says how (`speculative`: the method and its most draft tokens); one that does not
 * says nothing of it. Real `runtime worker` processes of the built CLI on the native CPU backend.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { spawnCli, type Spawned } from '../harness/processes.js';

describe.skipIf(!isNativeBuilt())('the worker ready line names the FP8 weights, the KV dtype and speculative decoding', () => {
  let dir: string;
  const children: Spawned[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-worker-ready-'));
  });
  afterAll(async () => {
    for (const c of children) await c.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function ready(model: string, extra: string[]): Promise<Record<string, unknown>> {
    const w = spawnCli(['worker', '--engine', 'native', '--model', model, '--num-gpu-blocks', '8', '--discovery', 'file', '--discovery-dir', join(dir, `d-${children.length}`), '--event-plane', 'direct', ...extra]);
    children.push(w);
    const line = await w.waitFor((l) => (l.includes('"worker ready"') ? l : undefined), { timeoutMs: 60_000, what: 'worker ready' });
    return JSON.parse(line) as Record<string, unknown>;
  }

  it('FP8 block-scaled checkpoint with --kv-cache-dtype fp8; a bf16 model with the default', async () => {
    const fp8 = join(dir, 'fp8');
    await makeTinyModel({ arch: 'qwen3', outDir: fp8, dtype: 'bf16', quantize: 'fp8-block' });
    const a = await ready(fp8, ['--kv-cache-dtype', 'fp8']);
    expect(a.quantization).toMatch(/^fp8 weights per \d+x\d+ block, activations dynamic per token/);
    expect(a.kvDtype).toBe('fp8_e4m3');
    expect(a.device).toMatch(/KV cache fp8_e4m3/);

    const plain = join(dir, 'bf16');
    await makeTinyModel({ arch: 'qwen3', outDir: plain, dtype: 'bf16' });
    const b = await ready(plain, []);
    expect(String(b.quantization ?? 'none')).not.toMatch(/fp8/);
    expect(String(b.kvDtype)).not.toMatch(/fp8/);
    expect(b.speculative).toBeUndefined();
  }, 120_000);

  it('--speculative suffix --num-speculative-tokens 3; ngram with its default', async () => {
    const model = join(dir, 'spec');
    await makeTinyModel({ arch: 'llama', outDir: model, dtype: 'bf16' });
    expect((await ready(model, ['--speculative', 'suffix', '--num-speculative-tokens', '3'])).speculative).toBe('suffix, up to 3 draft tokens');
    expect((await ready(model, ['--speculative', 'ngram'])).speculative).toMatch(/^ngram, up to \d+ draft tokens$/);
  }, 120_000);
});
