/**
 * What a mixture-of-experts model cannot do is refused at load through the real CLI
 * (`runtime worker`), as the FP8 refusals are (fp8-refusals-cli.test.ts): one line naming the
 * reason, exit 2, no stack trace, instead of a worker that registers and then fails every request
 * or serves a half-quantized model.
 *  - `--task embed` on a MoE model (native and mocker): Engine::embed cannot pool one.
 *  (`--quantization fp8` on a MoE model is no longer refused on the CUDA backend: its MoE kernels
 *  read e4m3 experts; fp8-moe-engine.test.ts.)
 *  - `--lora` on a MoE model (adapters on experts are out of scope): before, the CPU backend's
 *    card claimed adapters and the refusal came as `unavailable`, exit 4
 *    (test/lora/lora-moe-worker.test.ts: a run-time load is 400).
 * Spawns the built CLI (`npx tsc -b` and the native addon first).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { TINY_DIMS, makeTinyModel } from '../../workers/models/index.js';
import { spawnCli } from '../harness/processes.js';

const STACK_FRAME = /^\s+at /m;

describe('mixture-of-experts refusals at load: one line naming the reason, exit 2', () => {
  let dir: string;
  let moe: string;
  let local: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-moe-refusals-'));
    moe = join(dir, 'moe');
    await makeTinyModel({ arch: 'qwen3_moe', outDir: moe, dtype: 'bf16', seed: 2 });
    local = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--event-plane', 'direct', '--log-level', 'error'];
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** A worker that should refuse: its exit code and output (one still running after 30 s fails the test). */
  async function worker(extra: string[]): Promise<{ code: number | null; output: string }> {
    const p = spawnCli(['worker', ...local, '--model', moe, ...extra]);
    const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 30_000))]);
    if (!exit) {
      p.kill('SIGKILL');
      throw new Error(`worker did not exit within 30 s (it should refuse at load):\n${p.output()}`);
    }
    return { code: exit.code, output: p.output() };
  }

  function expectOneLineRefusal(r: { code: number | null; output: string }, re: RegExp): void {
    expect(r.code, r.output).toBe(EXIT_CODES.config);
    expect(r.output).toMatch(re);
    expect(r.output.trim().split('\n'), r.output).toHaveLength(1);
    expect(r.output).not.toMatch(STACK_FRAME);
  }

  for (const engine of ['native', 'mocker'] as const) {
    it(`--task embed on a MoE model (--engine ${engine})`, async () => {
      const extra = engine === 'native' ? ['--num-gpu-blocks', '8'] : [];
      expectOneLineRefusal(
        await worker(['--engine', engine, '--task', 'embed', ...extra]),
        /--task embed: embeddings from a mixture-of-experts model \(Qwen3MoeForCausalLM\) are not supported/,
      );
    }, 60_000);
  }

  it('--lora on a MoE model (--device cpu)', async () => {
    const adapter = await makeTinyLora({ dims: TINY_DIMS.qwen3_moe, outDir: join(dir, 'sql'), rank: 4 });
    expectOneLineRefusal(
      await worker(['--engine', 'native', '--device', 'cpu', '--num-gpu-blocks', '8', '--lora', `sql=${adapter}`]),
      /LoRA adapters on a mixture-of-experts model \(Qwen3MoeForCausalLM\) are not supported: adapters on experts are out of scope/,
    );
  }, 60_000);

});
