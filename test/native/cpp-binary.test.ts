/**
 * Runs the C++ test binaries (native/tests/) so CI covers the Node-free paths:
 *  - tandem_native_test on the CPU backend, with one golden fixture read by the C++ JSON reader
 *    and the CPU kernel checks against double-precision references;
 *  - the same engine checks on the GPU backend's code through the SIMT harness
 *    (TANDEM_TEST_DEVICE=simt): chunking, prefix hits, mixed batches, sampling on the device,
 *    decode graphs against eager steps (dense and MoE), errors, and every golden fixture at the
 *    stated bf16 tolerance;
 *  - tandem_gpu_kernel_test: every GPU kernel against the CPU backend's kernels or sampler.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { tinyModel, withTempDir } from './helpers.js';

const BUILD = join(import.meta.dirname, '../../native/build');
const BINARY = join(BUILD, 'tandem_native_test');
const KERNELS = join(BUILD, 'tandem_gpu_kernel_test');
const FIXTURES = join(import.meta.dirname, '../fixtures/goldens');
const run = promisify(execFile);

let tmp: Awaited<ReturnType<typeof withTempDir>>;
beforeAll(async () => {
  tmp = await withTempDir();
});
afterAll(async () => {
  await tmp.cleanup();
});

/** The fixture's model, made the way its `make_tiny` line says. */
async function fixtureModel(label: string): Promise<{ model: string; fixture: string }> {
  const fixture = join(FIXTURES, `${label}.json`);
  const meta = JSON.parse(readFileSync(fixture, 'utf8')) as { make_tiny: string };
  const [, arch, dtype, seed] = /--arch (\w+) .*--dtype (\w+) --seed (\d+)/.exec(meta.make_tiny)!;
  const yarn = meta.make_tiny.includes('--rope-scaling yarn') ? ('yarn' as const) : undefined;
  return { model: await tinyModel(tmp.dir, arch as 'llama', dtype as 'f32', Number(seed), yarn), fixture };
}

it('the C++ test binary passes its own checks and a golden fixture', async () => {
  expect(existsSync(BINARY), `${BINARY} missing: run npm run build:native`).toBe(true);
  const { model, fixture } = await fixtureModel('qwen3-f32');
  const { stdout } = await run(BINARY, ['--golden', model, fixture]);
  expect(stdout).toMatch(/golden case 3: 32 tokens, 32 equal/);
  // The kernel suites (GEMM edge shapes x tokens 1..37, paged attention layouts) ran.
  expect(stdout).toMatch(/gemm: 7 shapes x tokens 1\.\.37 x bias\/no bias x f32\/bf16 checked/);
  expect(stdout).toMatch(/attention: 6 layouts x 5 sequences checked/);
  // Mixtures of experts: torch.topk's tie order, routing, grouping, and ties end to end.
  expect(stdout).toMatch(/moe: torch\.topk tie order \(16 recorded cases\)/);
  expect(stdout).toMatch(/moe ties: zero router -> experts 6, 5 as torch\.topk/);
  // FP8 (fp8_checks.h): every checkpoint format on the CPU backend against its dequantized twin.
  for (const format of ['fp8-block', 'fp8-tensor-static', 'fp8-tensor-dynamic', 'ct-channel-token', 'ct-tensor-static', 'ct-channel-weight-only', 'ct-block-group', 'fbgemm']) {
    expect(stdout).toMatch(new RegExp(`fp8 ${format} +W8A16 max rel \\S+, W8A8 logits rel L2 \\S+`));
  }
  expect(stdout).toMatch(/fp8 KV cache: logits rel L2 \S+ \(bf16 KV \S+\)/);
  expect(stdout).toMatch(/\d+ checks, 0 failures/);
});

it('the MoE and YaRN golden fixtures hold on the CPU backend (1e-3, every greedy token)', async () => {
  for (const label of ['qwen3-moe-f32', 'mixtral-bf16', 'qwen3-yarn-f32']) {
    const { model, fixture } = await fixtureModel(label);
    const { stdout } = await run(BINARY, ['--golden', model, fixture], { maxBuffer: 1 << 24 });
    expect(stdout.match(/^golden case \d: 32 tokens, 32 equal/gm), label).toHaveLength(4);
    expect(stdout, label).toMatch(/\d+ checks, 0 failures/);
  }
}, 240_000);

it('the GPU backend on FP8 checkpoints (SIMT harness) agrees with the CPU backend: every format, W8A8 and W8A16, and the FP8 KV cache', async () => {
  const { stdout } = await run(BINARY, ['--fp8'], { env: { ...process.env, TANDEM_TEST_DEVICE: 'simt' }, maxBuffer: 1 << 24 });
  expect(stdout.match(/^fp8 on simt: .* W8A16 max \|diff\| \/ RMS \S+, W8A8 rel L2 \S+ against the exact model$/gm)).toHaveLength(8);
  expect(stdout).toMatch(/fp8 KV on simt: rel L2 \S+ against the exact model; simt:.*KV cache fp8_e4m3/);
  // The fused decode step over FP8 weights equals the per-op FP8 kernels.
  expect(stdout).toMatch(/fp8 on simt: the fused decode step equals the per-op kernels bit for bit \(8 formats, W8A8 and W8A16\)/);
  expect(stdout).toMatch(/\d+ checks, 0 failures/);
}, 300_000);

it('the engine checks pass on the GPU backend (SIMT harness), decode graphs equal eager steps, and every golden fixture holds at the bf16 tolerance', async () => {
  const env = { ...process.env, TANDEM_TEST_DEVICE: 'simt' };
  // The whole suite once (a minute on simt), then the other fixtures alone.
  for (const [i, label] of ['llama-f32', 'qwen2-f32', 'qwen3-f32', 'llama-bf16', 'qwen2-moe-f32', 'qwen3-moe-f32', 'mixtral-bf16', 'mixtral-f32', 'qwen3-yarn-f32'].entries()) {
    const { model, fixture } = await fixtureModel(label);
    const { stdout } = await run(BINARY, [i === 0 ? '--golden' : '--golden-only', model, fixture], { env, maxBuffer: 1 << 24 });
    if (i === 0) {
      expect(stdout, label).toMatch(/decode graphs \(llama\): 30 steps replayed from \d graphs/);
      expect(stdout, label).toMatch(/decode graphs \(qwen3_moe\): 30 steps replayed from \d graphs/);
      // The fused decode kernels and the fast sampler equal the per-op kernels and the one-block sampler.
      expect(stdout, label).toMatch(/decode paths \(qwen2\): 12 fused decode steps equal the per-op kernels bit for bit/);
      expect(stdout, label).toMatch(/decode paths \(qwen3\): 12 fused decode steps equal the per-op kernels bit for bit/);
      for (const model of ['qwen2, e4m3 KV', 'qwen3_moe', 'qwen2_moe']) {
        expect(stdout, label).toContain(`decode paths (${model}): 12 fused decode steps equal the per-op kernels bit for bit`);
      }
    }
    expect(stdout.match(/^golden case \d: 32 tokens/gm), label).toHaveLength(4);
    expect(stdout, label).toMatch(/\d+ checks, 0 failures/);
  }
}, 300_000);

it('every GPU kernel agrees with the CPU backend on the SIMT harness', async () => {
  expect(existsSync(KERNELS), `${KERNELS} missing: run npm run build:native`).toBe(true);
  const { stdout } = await run(KERNELS, [], { env: { ...process.env, TANDEM_TEST_DEVICE: 'simt' }, maxBuffer: 1 << 24 });
  // The harness runs blocks and threads out of index order and lands cp.async at its wait, and catches planted order bugs.
  expect(stdout).toMatch(/^device: SIMT harness \(host\) \(simt, blocks and threads shuffled, seed 1\)$/m);
  expect(stdout).toMatch(/gpu harness: .*caught out of index order .*cp\.async landing at its wait_group checked, a dependent launch that skips its wait refused, allocation and synchronization in a graph capture refused, misaligned cp.async and ldmatrix addresses refused, divergent barriers and half-warp collectives refused, pinned copies asynchronous until the synchronize, the side stream deferred to its synchronize, a misaligned 16-byte vector read traps$/m);
  expect(stdout).toMatch(/gpu elementwise: .* checked on simt/);
  // The KV kernels again over pools past 2^32 elements (64-bit offsets).
  for (const suite of ['elementwise', 'attention', 'decode fused', 'kv copy']) {
    expect(stdout).toMatch(new RegExp(`^gpu ${suite}: .* checked on simt .*past 2\\^32 (pool )?elements\\)$`, 'm'));
  }
  expect(stdout).toMatch(/gpu attention: 8 layouts x 9 sequences \(2 verify steps, as spans and per row\) x 4 split counts checked on simt/);
  expect(stdout).toMatch(/gpu attention prefill: .* checked on simt/);
  expect(stdout).toMatch(/gpu gemm: \d+ shapes, \d+ plans .* checked on simt/);
  expect(stdout).toMatch(/gpu decode fused: \d+ cases .* checked on simt/);
  expect(stdout).toMatch(/gpu sampling: \d+ rows .* checked against the CPU sampler on simt/);
  expect(stdout).toMatch(/gpu sampling fast path: \d+ rows checked against the CPU sampler on simt/);
  expect(stdout).toMatch(/gpu kv copy: 432 cases .*f32\/bf16\/fp8.* checked on simt/);
  expect(stdout).toMatch(/gpu moe: topk tie emulation vs libstdc\+\+, 12 layers .*FP8 experts.*combine on its own and in the down launch.* checked on simt/);
  expect(stdout).toMatch(/gpu fp8: \d+ cases .* checked on simt/);
  expect(stdout).toMatch(/\d+ checks, 0 failures/);
}, 240_000);
