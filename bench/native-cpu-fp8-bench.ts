/**
 * FP8 on the native CPU engine: keep e4m3 bytes in memory, or dequantize at load? One run, side
 * by side, on the 0.5B-shaped random model (bench/fixtures/random-model.ts) written twice from the
 * same draws: as bf16, and as an FP8 checkpoint (compressed-tensors, per-channel scales, dynamic
 * per-token activations). Engines:
 *
 *   bf16            the bf16 checkpoint (2 bytes per weight; today's path)
 *   fp8 W8A8        the FP8 checkpoint kept as e4m3 (1 byte per weight), activations quantized
 *   fp8 W8A16       the same, activations unquantized (fp8Compute 'w8a16')
 *   fp8 dequantized the FP8 checkpoint dequantized to f32 at load (--quantization none: 4 bytes
 *                   per weight, what "dequantize at load" costs without losing the exact values)
 *
 * Each: prefill of --prompt tokens, then decode at batch 1 and 8; tokens per second (wall) and
 * per CPU-second of this process (all threads; steadier on a shared machine). Writes
 * bench/results/native-cpu-fp8-bench.json.
 *
 *   node --import tsx bench/native-cpu-fp8-bench.ts [--threads N] [--prompt 64] [--decode-steps 8] [--keep-models DIR]
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { benchSequences } from './fixtures/step-sequences.js';
import { QWEN2_05B_SHAPE, writeRandomModel } from './fixtures/random-model.js';
import { createNativeEngine, type NativeEngine, type NativeEngineOptions } from '../workers/engines/native/index.js';

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(availableParallelism()) },
    prompt: { type: 'string', default: '64' },
    'decode-steps': { type: 'string', default: '8' },
    'keep-models': { type: 'string' },
  },
});

interface Rate {
  tokPerSec: number;
  tokPerCpuSec: number;
  stepMs: number;
}

async function timed(engine: NativeEngine, fn: () => Promise<unknown>, tokens: number): Promise<Rate> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { tokPerSec: tokens / (ms / 1000), tokPerCpuSec: tokens / ((c.user + c.system) / 1e6), stepMs: ms };
}

async function measure(engine: NativeEngine, prompt: number, steps: number) {
  const out: Record<string, Rate> = {};
  for (const batch of [1, 8]) {
    const per = Math.ceil((prompt + steps + 1) / engine.info.blockSize);
    const seqs = benchSequences(batch, prompt, engine.info.vocabSize, per);
    out[`prefill b${batch}`] = await timed(engine, () => engine.step({ sequences: seqs }), batch * prompt);
    let ms = 0, cpu = 0;
    for (let i = 0; i < steps; i++) {
      const step = seqs.map((s) => ({ ...s, tokenIds: Int32Array.of(7), startPos: prompt + i }));
      const r = await timed(engine, () => engine.step({ sequences: step }), batch);
      ms += r.stepMs;
      cpu += batch / r.tokPerCpuSec;
    }
    out[`decode b${batch}`] = { tokPerSec: (batch * steps) / (ms / 1000), tokPerCpuSec: (batch * steps) / cpu, stepMs: ms / steps };
  }
  return out;
}

async function main(): Promise<void> {
  const threads = Number(args.threads);
  const prompt = Number(args.prompt);
  const steps = Number(args['decode-steps']);
  const root = args['keep-models'] ?? (await mkdtemp(join(tmpdir(), 'tandem-cpu-fp8-bench-')));
  const bf16 = join(root, 'bf16');
  const fp8 = join(root, 'fp8-channel');
  for (const [dir, quantize] of [[bf16, undefined], [fp8, 'fp8-channel']] as const) {
    if (existsSync(join(dir, 'config.json'))) continue;
    await mkdir(dir, { recursive: true });
    const t0 = performance.now();
    await writeRandomModel(dir, QWEN2_05B_SHAPE, 'bf16', quantize);
    console.error(`wrote ${dir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
  const configs: Array<[string, NativeEngineOptions]> = [
    ['bf16', { modelDir: bf16 }],
    ['fp8 W8A8', { modelDir: fp8 }],
    ['fp8 W8A16', { modelDir: fp8, fp8Compute: 'w8a16' }],
    ['fp8 dequantized (f32)', { modelDir: fp8, quantization: 'none' }],
  ];
  const results: Record<string, unknown> = {};
  const load0 = loadavg()[0];
  for (const [name, options] of configs) {
    const t0 = performance.now();
    const engine = await createNativeEngine({ ...options, numBlocks: 256, threads });
    const loadSeconds = (performance.now() - t0) / 1000;
    await measure(engine, 16, 2); // warm-up: page in the weights, size the scratch
    const m = await measure(engine, prompt, steps);
    results[name] = { loadSeconds, device: engine.deviceDescription, ...m };
    console.error(`${name}: ${Object.entries(m).map(([k, r]) => `${k} ${r.tokPerSec.toFixed(1)} tok/s (${r.tokPerCpuSec.toFixed(1)}/CPU-s)`).join(', ')}`);
    await engine.close();
  }
  const report = { bench: 'native-cpu-fp8', date: new Date().toISOString(), cpu: cpus()[0]?.model, threads, prompt, decodeSteps: steps, loadavg: [load0, loadavg()[0]], results };
  const out = join(import.meta.dirname, 'results/native-cpu-fp8-bench.json');
  await mkdir(join(import.meta.dirname, 'results'), { recursive: true });
  await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`\nnative-cpu-fp8-bench: ${cpus()[0]?.model}, ${threads} threads, prompt ${prompt} (load ${load0.toFixed(1)} -> ${loadavg()[0].toFixed(1)})`);
  const keys = ['prefill b1', 'decode b1', 'prefill b8', 'decode b8'];
  console.log(`engine                 | ${keys.map((k) => `${k} tok/s (/CPU-s)`).join(' | ')}`);
  for (const [name, r] of Object.entries(results) as Array<[string, Record<string, Rate>]>) {
    console.log(`${name.padEnd(22)} | ${keys.map((k) => `${r[k]!.tokPerSec.toFixed(1)} (${r[k]!.tokPerCpuSec.toFixed(1)})`).join(' | ')}`);
  }
  console.log(`wrote ${out}`);
  if (args['keep-models'] === undefined) await rm(root, { recursive: true, force: true });
}

await main();
