/**
 * Native engine on a GPU (issue 22): random bf16 weights in Qwen2-0.5B, Llama-3.2-1B and
 * Llama-3.1-8B shapes, written by `tandem_gpu_bench make-model`, loaded through NativeEngine
 * (the worker's own path: TypeScript marshalling, the addon, device sampling).
 *
 *   decode   tok/s at batch 1, 4, 8, 64 and 256 after an ISL-token prefill, greedy; batch 1 also
 *            as a fraction of the HBM roofline (bytes a decode step must read: every projection
 *            and the lm_head once, plus the KV of the context; over the device-to-device copy
 *            bandwidth measured in the same run, `tandem_gpu_bench bandwidth`);
 *   roofline the decode step before and after the fused decode kernels, side by side in this run:
 *            each shape reloaded with TANDEM_GPU_DECODE=unfused (the per-op kernels) and decoded at
 *            batch 1, 4 and 8 again; step ms, share of the roofline, speedup; and reloaded with
 *            TANDEM_GPU_OVERLAP=0 (the fused kernels launched the ordinary way, not as programmatic
 *            dependents) at batch 1 and 8 (--no-compare-decode skips both);
 *   sampler  microseconds per step of the one-block and the fast sampler (`tandem_gpu_bench
 *            sample`, --sample-json), batch 1 over 152k tokens first;
 *   prefill  tok/s of one 512, 2k and 8k-token prompt;
 *   graphs   decode step time with and without CUDA graphs (first shape, batch 1 and 64);
 *   GEMM     cuBLASLt and our own kernels (`tandem_gpu_bench gemm`) against torch.matmul on
 *            the same shapes (scripts/device/torch_baselines.py, same machine, same run);
 *   ratios   batch-64 decode against transformers `generate` at batch 64 (same script).
 *
 *   node dist/bench/native-gpu-bench.js [--device cuda|simt] [--shapes a,b] [--quick]
 *        [--tool PATH] [--bandwidth-json F] [--gemm-json F] [--torch-json F] [--out F]
 *
 * Writes bench/results/native-gpu-bench.json (or --out) and prints a table. On `simt` (the CUDA
 * backend's kernels on the host) it only proves the bench runs: the numbers mean nothing.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { benchSequences } from './fixtures/step-sequences.js';
import type { RandomModelShape } from './fixtures/random-model.js';
import { createNativeEngine, type NativeEngine } from '../workers/engines/native/index.js';

interface Shape extends RandomModelShape {
  name: string;
}

/** Must match bench/cuda/gpu_bench.cc's shapes. */
const SHAPES: Shape[] = [
  // Dry runs on the SIMT harness only (the default there).
  { name: 'tiny', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, inter: 128, vocab: 512 },
  { name: 'qwen2-0.5b', hidden: 896, layers: 24, heads: 14, kvHeads: 2, headDim: 64, inter: 4864, vocab: 151936 },
  { name: 'llama-3.2-1b', hidden: 2048, layers: 16, heads: 32, kvHeads: 8, headDim: 64, inter: 8192, vocab: 128256 },
  { name: 'llama-3.1-8b', hidden: 4096, layers: 32, heads: 32, kvHeads: 8, headDim: 128, inter: 14336, vocab: 128256 },
];

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: 'cuda' },
    shapes: { type: 'string' },
    quick: { type: 'boolean', default: false },
    tool: { type: 'string' },
    'models-dir': { type: 'string' },
    model: { type: 'string' },
    batches: { type: 'string', default: '1,4,8,64,256' },
    isl: { type: 'string', default: '128' },
    'decode-steps': { type: 'string', default: '32' },
    prefill: { type: 'string', default: '512,2048,8192' },
    'bandwidth-json': { type: 'string' },
    'gemm-json': { type: 'string' },
    'torch-json': { type: 'string' },
    'sample-json': { type: 'string' },
    'no-compare-decode': { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

/** The repository (or bundle) root: bench/ from source, dist/bench/ when compiled. */
const REPO = resolve(import.meta.dirname, existsSync(resolve(import.meta.dirname, '../bin/runtime.js')) ? '..' : '../..');
const list = (s: string) => s.split(',').filter((x) => x !== '').map(Number);

/** Bytes one batch-1 decode step must read at context `ctx`: projections, lm_head, one embedding row, the KV. */
function decodeBytes(s: Shape, ctx: number): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const perLayer = s.hidden * (q + 2 * kv) + q * s.hidden + 2 * s.hidden * s.inter + s.inter * s.hidden;
  const weights = 2 * (s.layers * perLayer + s.vocab * s.hidden + s.hidden);
  return weights + ctx * s.layers * 2 * kv * 2;
}

interface Decode {
  batch: number;
  tokPerSec: number;
  stepMs: number;
  tsShare: number;
  roofline?: number;
}

async function decodeRun(engine: NativeEngine, batch: number, isl: number, steps: number, maxTokens: number): Promise<Decode> {
  const bs = engine.info.blockSize;
  const blocksPerSeq = Math.ceil((isl + steps + 1) / bs);
  const all = benchSequences(batch, isl, engine.info.vocabSize, blocksPerSeq);
  // Prefill in groups that fit the step's token budget.
  const per = Math.max(1, Math.floor(maxTokens / isl));
  let last: number[] = [];
  for (let i = 0; i < all.length; i += per) {
    const r = await engine.step({ sequences: all.slice(i, i + per) });
    last.push(...r.sampled.map((t) => t.tokenId));
  }
  let ms = 0;
  let ts = 0;
  for (let i = 0; i < steps; i++) {
    const step = all.map((s, b) => ({ ...s, tokenIds: Int32Array.of(last[b]!), startPos: isl + i }));
    const t0 = performance.now();
    const r = await engine.step({ sequences: step });
    const dt = performance.now() - t0;
    if (i >= 2) {
      // The first steps capture this batch size's graph.
      ms += dt;
      ts += engine.lastTiming.marshalMs + engine.lastTiming.unmarshalMs;
    }
    last = r.sampled.map((t) => t.tokenId);
  }
  const timed = steps - 2;
  return { batch, tokPerSec: (batch * timed) / (ms / 1000), stepMs: ms / timed, tsShare: ts / ms };
}

async function prefillRun(engine: NativeEngine, len: number): Promise<{ tokens: number; tokPerSec: number; ms: number }> {
  const bs = engine.info.blockSize;
  const s = benchSequences(1, len, engine.info.vocabSize, Math.ceil((len + 1) / bs));
  await engine.step({ sequences: s });  // warm-up at this length
  const t0 = performance.now();
  await engine.step({ sequences: s });
  const ms = performance.now() - t0;
  return { tokens: len, tokPerSec: len / (ms / 1000), ms };
}

async function readJson(path: string | undefined): Promise<any> {
  return path !== undefined && existsSync(path) ? JSON.parse(await readFile(path, 'utf8')) : undefined;
}

async function main(): Promise<void> {
  const device = args.device!;
  const quick = args.quick!;
  const tool = args.tool ?? join(REPO, 'native/build/tandem_gpu_bench');
  const isl = Number(args.isl);
  const steps = Math.max(4, Number(args['decode-steps']) + 2);
  const batches = quick ? [1, 64] : list(args.batches!);
  const prefills = device === 'simt' ? [64] : quick ? [512, 2048] : list(args.prefill!);
  const wanted = args.shapes !== undefined ? args.shapes.split(',') : device === 'simt' ? ['tiny'] : quick ? ['qwen2-0.5b'] : SHAPES.filter((s) => s.name !== 'tiny').map((s) => s.name);
  const bandwidth = await readJson(args['bandwidth-json']);
  const gemm = await readJson(args['gemm-json']);
  const torch = await readJson(args['torch-json']);
  const sampler = await readJson(args['sample-json']);
  const copyGBps: number | undefined = bandwidth?.copy_gbps;
  const modelsDir = args['models-dir'] ?? (await mkdtemp(join(tmpdir(), 'tandem-gpu-bench-')));
  const maxTokens = 8192;
  const results: Record<string, unknown> = {};
  let deviceLine = '';
  let firstShape = true;
  // The report so far: written after every shape, so a run cut short by its step's timeout
  // (scripts/device/run-all.sh) still leaves the shapes it finished ("complete": false).
  const out = args.out ?? join(REPO, 'bench/results/native-gpu-bench.json');
  const writeReport = async (complete: boolean): Promise<Record<string, number>> => {
    // Ratios measured side by side in this run.
    const ratios: Record<string, number> = {};
    const first = results['qwen2-0.5b'] as { decode: Decode[] } | undefined;
    const hf64 = torch?.transformers?.['batch64']?.tok_per_s;
    const ours64 = first?.decode.find((d) => d.batch === 64)?.tokPerSec;
    if (hf64 !== undefined && ours64 !== undefined) ratios.decodeBatch64VsTransformers = ours64 / hf64;
    const gemmRows: unknown[] = [];
    for (const c of gemm?.cases ?? []) {
      const t = torch?.matmul?.find((x: { m: number; n: number; k: number }) => x.m === c.m && x.n === c.n && x.k === c.k)?.tflops;
      gemmRows.push({ ...c, torch_tflops: t ?? null, cublaslt_vs_torch: t && c.cublaslt_tflops ? c.cublaslt_tflops / t : null, own_vs_torch: t && c.own_tflops ? c.own_tflops / t : null });
    }
    const report = { bench: 'native-gpu', date: new Date().toISOString(), complete, device: deviceLine, gpu: bandwidth?.device ?? gemm?.device, copyGBps, isl, decodeSteps: steps - 2, results, gemm: gemmRows, torch, sampler, ratios };
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
    return ratios;
  };
  for (const name of wanted) {
    const shape = SHAPES.find((s) => s.name === name);
    if (shape === undefined) throw new Error(`unknown shape ${name}`);
    const dir = args.model ?? join(modelsDir, name);
    if (!existsSync(join(dir, 'config.json'))) {
      const t0 = performance.now();
      execFileSync(tool, ['make-model', '--shape', name, '--out', dir], { stdio: 'inherit' });
      console.error(`${name}: model written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    // The backend reads TANDEM_GPU_DECODE and TANDEM_GPU_OVERLAP once, when it is made
    // (gpu_backend_decode.cc): the engine under test takes the inherited ones (profile-decode.sh
    // sets them), the comparisons their own.
    const load = async (cudaGraphs: boolean, env: Record<string, string> = {}) => {
      const inherited = Object.keys(env).map((k) => [k, process.env[k]] as const);
      Object.assign(process.env, env);
      try {
        return await createNativeEngine({ modelDir: dir, device, maxBatchTokens: maxTokens, maxSeqs: 256, cudaGraphs, ...(device === 'simt' ? { numBlocks: 4096 } : {}) });
      } finally {
        for (const [k, v] of inherited) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
      }
    };
    const t0 = performance.now();
    let engine = await load(true);
    const loadSeconds = (performance.now() - t0) / 1000;
    deviceLine = engine.deviceDescription;
    console.error(`${name}: loaded in ${loadSeconds.toFixed(1)} s on ${deviceLine}; ${engine.info.numBlocks} KV blocks`);
    const decode: Decode[] = [];
    for (const b of device === 'simt' ? [1, 8] : batches) {
      const d = await decodeRun(engine, b, device === 'simt' ? 16 : isl, device === 'simt' ? 6 : steps, maxTokens);
      if (b === 1 && copyGBps !== undefined) d.roofline = d.tokPerSec / ((copyGBps * 1e9) / decodeBytes(shape, isl + steps / 2));
      decode.push(d);
      console.error(`  decode batch ${b}: ${d.tokPerSec.toFixed(0)} tok/s, ${d.stepMs.toFixed(2)} ms/step${d.roofline !== undefined ? `, ${(100 * d.roofline).toFixed(1)}% of roofline` : ''}`);
    }
    const prefill = [];
    for (const len of prefills) {
      const p = await prefillRun(engine, len);
      prefill.push(p);
      console.error(`  prefill ${len}: ${p.tokPerSec.toFixed(0)} tok/s (${p.ms.toFixed(1)} ms)`);
    }
    let graphs: unknown;
    if (firstShape) {
      const withGraphs = decode.filter((d) => d.batch === 1 || d.batch === 64 || (device === 'simt' && d.batch === 8));
      await engine.close();
      engine = await load(false);
      const eager: Decode[] = [];
      for (const d of withGraphs) eager.push(await decodeRun(engine, d.batch, device === 'simt' ? 16 : isl, device === 'simt' ? 6 : steps, maxTokens));
      graphs = withGraphs.map((d, i) => ({ batch: d.batch, graphStepMs: d.stepMs, eagerStepMs: eager[i]!.stepMs, speedup: eager[i]!.stepMs / d.stepMs }));
      console.error(`  graphs: ${JSON.stringify(graphs)}`);
    }
    await engine.close();
    // The decode step before the fused kernels (the per-op path), same weights, same run.
    let rooflineCompare: unknown;
    if (!args['no-compare-decode']) {
      const unfused = await load(true, { TANDEM_GPU_DECODE: 'unfused' });
      const rows: Array<Record<string, number | undefined>> = [];
      for (const b of device === 'simt' ? [1] : [1, 4, 8]) {
        const before = await decodeRun(unfused, b, device === 'simt' ? 16 : isl, device === 'simt' ? 6 : steps, maxTokens);
        const after = decode.find((d) => d.batch === b);
        const bytes = decodeBytes(shape, isl + steps / 2);
        const share = (d: Decode) => (copyGBps !== undefined ? d.tokPerSec / b / ((copyGBps * 1e9) / bytes) : undefined);
        rows.push({
          batch: b,
          beforeStepMs: before.stepMs,
          afterStepMs: after?.stepMs,
          beforeRoofline: share(before),
          afterRoofline: after !== undefined ? share(after) : undefined,
          speedup: after !== undefined ? before.stepMs / after.stepMs : undefined,
          stepMsAtRoofline: copyGBps !== undefined ? (bytes / (copyGBps * 1e9)) * 1000 : undefined,
        });
      }
      await unfused.close();
      // The fused kernels launched the ordinary way: what overlapping their launches gains.
      const serial = await load(true, { TANDEM_GPU_OVERLAP: '0' });
      for (const row of rows) {
        if (row.batch !== 1 && row.batch !== 8) continue;
        const s = await decodeRun(serial, row.batch!, device === 'simt' ? 16 : isl, device === 'simt' ? 6 : steps, maxTokens);
        row.serialStepMs = s.stepMs;
        row.overlapSpeedup = row.afterStepMs !== undefined ? s.stepMs / row.afterStepMs : undefined;
      }
      await serial.close();
      rooflineCompare = rows;
      console.error(`  decode before/after the fused kernels: ${JSON.stringify(rows)}`);
    }
    results[name] = {
      loadSeconds,
      kvBlocks: engine.info.numBlocks,
      decode,
      prefill,
      ...(graphs !== undefined ? { graphs } : {}),
      ...(rooflineCompare !== undefined ? { decodeBeforeAfter: rooflineCompare } : {}),
      rooflineBytesPerToken: decodeBytes(shape, isl),
    };
    firstShape = false;
    await writeReport(false);
  }

  const ratios = await writeReport(true);
  console.log(`\nnative-gpu-bench on ${deviceLine}`);
  console.log('shape          | decode b1 tok/s (roofline) | b8 | b64 | b256 | prefill 512 / 2k / 8k tok/s');
  for (const [name, r] of Object.entries(results) as Array<[string, { decode: Decode[]; prefill: Array<{ tokPerSec: number }> }]>) {
    const d = (b: number) => r.decode.find((x) => x.batch === b);
    const b1 = d(1);
    console.log(
      `${name.padEnd(14)} | ${b1 ? `${b1.tokPerSec.toFixed(0)} (${b1.roofline !== undefined ? `${(100 * b1.roofline).toFixed(0)}%` : '-'})` : '-'} | ${d(8)?.tokPerSec.toFixed(0) ?? '-'} | ${d(64)?.tokPerSec.toFixed(0) ?? '-'} | ${d(256)?.tokPerSec.toFixed(0) ?? '-'} | ${r.prefill.map((p) => p.tokPerSec.toFixed(0)).join(' / ')}`,
    );
  }
  console.log('\ndecode step, batch 1, before (per-op kernels) / after (fused, overlapped launches): ms and share of the HBM roofline; the fused kernels not overlapped');
  for (const [name, r] of Object.entries(results) as Array<[string, { decodeBeforeAfter?: Array<Record<string, number | undefined>> }]>) {
    const b1 = r.decodeBeforeAfter?.find((x) => x.batch === 1);
    if (b1 === undefined) continue;
    const pct = (x: number | undefined) => (x !== undefined ? `${(100 * x).toFixed(0)}%` : '-');
    console.log(`${name.padEnd(14)} | ${b1.beforeStepMs?.toFixed(3)} ms (${pct(b1.beforeRoofline)}) -> ${b1.afterStepMs?.toFixed(3)} ms (${pct(b1.afterRoofline)}) | ${b1.speedup?.toFixed(2)}x | roofline step ${b1.stepMsAtRoofline?.toFixed(3) ?? '-'} ms | not overlapped ${b1.serialStepMs?.toFixed(3) ?? '-'} ms (${b1.overlapSpeedup?.toFixed(2) ?? '-'}x)`);
  }
  for (const c of (sampler?.cases ?? []) as Array<{ case: string; batch: number; block_us: number; fast_us: number }>) {
    if (c.batch === 1) console.log(`sampler ${c.case}, batch 1, vocab ${sampler.vocab}: ${c.block_us.toFixed(1)} us -> ${c.fast_us.toFixed(1)} us`);
  }
  for (const [k, v] of Object.entries(ratios)) console.log(`${k}: ${v.toFixed(2)}x`);
  console.log(`wrote ${out}`);
  if (args['models-dir'] === undefined && args.model === undefined) await rm(modelsDir, { recursive: true, force: true });
}

await main();
