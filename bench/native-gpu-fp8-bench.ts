/**
 * FP8 against bf16 on the same model shape, in one run, through NativeEngine (issue 35):
 *
 *   weights   the Llama-3.1-8B-shaped random bf16 model (`tandem_gpu_bench make-model`) loaded as
 *             bf16, and the same files with --quantization fp8 (per-channel e4m3 weights,
 *             dynamic per-token activations) and, given --block-model, an fp8-block checkpoint:
 *             decode tok/s at batch 1 (with the share of the FP8 roofline: the bytes a step reads
 *             over the copy bandwidth measured in this run), 64 and 256; prefill tok/s of a 2k
 *             prompt;
 *   KV cache  decode at batch 64 and an 8k context with a bf16 and an e4m3 KV pool (the same
 *             bf16 weights), and the blocks each pool holds in the same memory; the context is
 *             addressed, not prefilled (decode time does not depend on the cached values);
 *   70B       with --big DIR (`tandem_fp8_bench make-sparse --shape llama-3.1-70b`: zero weights
 *             in a sparse file), whether a 70B-shaped FP8 model loads and decodes on this GPU,
 *             with the memory figures either way.
 *
 *   node dist/bench/native-gpu-fp8-bench.js --model DIR [--block-model DIR] [--big DIR]
 *        [--device cuda|simt] [--bandwidth-json F] [--quick] [--out F]
 *
 * Prints a table; writes JSON (default bench/results/native-gpu-fp8-bench.json) meant for
 * bench/results/gpu-<name>/ beside the bf16 benchmark of the same run.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { benchSequences } from './fixtures/step-sequences.js';
import type { RandomModelShape } from './fixtures/random-model.js';
import { createNativeEngine, type NativeEngine, type NativeEngineOptions } from '../workers/engines/native/index.js';

const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    'block-model': { type: 'string' },
    big: { type: 'string' },
    device: { type: 'string', default: 'cuda' },
    'bandwidth-json': { type: 'string' },
    quick: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

const REPO = resolve(import.meta.dirname, existsSync(resolve(import.meta.dirname, '../bin/runtime.js')) ? '..' : '../..');

interface ModelShape extends RandomModelShape {
  tie: boolean;
}

async function shapeOf(dir: string): Promise<ModelShape> {
  const c = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Record<string, number | boolean>;
  return {
    hidden: c.hidden_size as number,
    layers: c.num_hidden_layers as number,
    heads: c.num_attention_heads as number,
    kvHeads: c.num_key_value_heads as number,
    headDim: (c.head_dim as number | undefined) ?? (c.hidden_size as number) / (c.num_attention_heads as number),
    inter: c.intermediate_size as number,
    vocab: c.vocab_size as number,
    tie: c.tie_word_embeddings === true,
  };
}

/** Bytes a batch-1 decode step reads: projections (weightBytes each), the LM head in bf16, the KV of the context. */
function stepBytes(s: ModelShape, weightBytes: number, ctx: number, kvBytes: number): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const perLayer = s.hidden * (q + 2 * kv) + q * s.hidden + 3 * s.hidden * s.inter;
  return weightBytes * s.layers * perLayer + 2 * s.vocab * s.hidden + ctx * s.layers * 2 * kv * kvBytes;
}

/** Decode steps at context `ctx` for `batch` sequences: tables address the context, nothing is prefilled. */
async function decodeAt(engine: NativeEngine, batch: number, ctx: number, steps: number): Promise<{ batch: number; ctx: number; tokPerSec: number; stepMs: number }> {
  const bs = engine.info.blockSize;
  const perSeq = Math.ceil((ctx + steps + 1) / bs);
  if (batch * perSeq > engine.info.numBlocks) throw new Error(`batch ${batch} at context ${ctx} needs ${batch * perSeq} KV blocks, the pool has ${engine.info.numBlocks}`);
  const seqs = benchSequences(batch, 1, engine.info.vocabSize, perSeq);
  let ms = 0;
  for (let i = 0; i < steps; i++) {
    const step = seqs.map((s) => ({ ...s, startPos: ctx + i }));
    const t0 = performance.now();
    await engine.step({ sequences: step });
    if (i >= 2) ms += performance.now() - t0; // the first steps capture this batch's graph
  }
  const timed = steps - 2;
  return { batch, ctx, tokPerSec: (batch * timed) / (ms / 1000), stepMs: ms / timed };
}

async function prefillOf(engine: NativeEngine, len: number): Promise<{ tokens: number; tokPerSec: number; ms: number }> {
  const s = benchSequences(1, len, engine.info.vocabSize, Math.ceil((len + 1) / engine.info.blockSize));
  await engine.step({ sequences: s });
  const t0 = performance.now();
  await engine.step({ sequences: s });
  const ms = performance.now() - t0;
  return { tokens: len, tokPerSec: len / (ms / 1000), ms };
}

async function timedLoad(options: NativeEngineOptions): Promise<{ engine: NativeEngine; seconds: number }> {
  const t0 = performance.now();
  const engine = await createNativeEngine(options);
  return { engine, seconds: (performance.now() - t0) / 1000 };
}

/** One weights configuration's measurements, as the report and the table read them. */
type WeightRuns = Record<string, { decode: Array<{ batch: number; tokPerSec: number }>; prefill: { tokPerSec: number } }>;

async function main(): Promise<void> {
  const device = args.device!;
  const simt = device === 'simt';
  const model = args.model;
  if (model === undefined) throw new Error('--model DIR (a bf16 checkpoint; tandem_gpu_bench make-model --shape llama-3.1-8b)');
  const shape = await shapeOf(model);
  const bandwidth = args['bandwidth-json'] !== undefined && existsSync(args['bandwidth-json']) ? JSON.parse(await readFile(args['bandwidth-json'], 'utf8')) : undefined;
  const copyGBps: number | undefined = bandwidth?.copy_gbps;
  const steps = simt ? 4 : args.quick ? 12 : 34;
  const batches = simt ? [1, 4] : [1, 64, 256];
  const prefillLen = simt ? 64 : 2048;
  const base: NativeEngineOptions = { modelDir: model, device, maxBatchTokens: simt ? 256 : 8192, maxSeqs: 256, ...(simt ? { numBlocks: 512 } : {}) };

  const configs: Array<{ name: string; options: NativeEngineOptions; weightBytes: number }> = [
    { name: 'bf16', options: base, weightBytes: 2 },
    { name: 'fp8-channel', options: { ...base, quantization: 'fp8' }, weightBytes: 1 },
  ];
  if (args['block-model'] !== undefined) configs.push({ name: 'fp8-block', options: { ...base, modelDir: args['block-model'] }, weightBytes: 1 });

  const weights: Record<string, unknown> = {};
  let deviceLine = '';
  const kvBatch = simt ? 2 : 64;
  const kvCtx = simt ? 128 : 8192;
  const kv: Record<string, unknown> = {};
  let big: Record<string, unknown> | undefined;
  // The report so far, written after each part, so a run cut short by its step's timeout
  // (scripts/device/run-all.sh) still leaves what it measured ("complete": false). Ratios are
  // of the parts measured so far.
  const out = args.out ?? join(REPO, 'bench/results/native-gpu-fp8-bench.json');
  const writeReport = async (complete: boolean): Promise<Record<string, number>> => {
    const w = weights as WeightRuns;
    const ratio = (name: string, b: number) => (w[name]?.decode.find((d) => d.batch === b)?.tokPerSec ?? NaN) / (w.bf16?.decode.find((d) => d.batch === b)?.tokPerSec ?? NaN);
    const ratios: Record<string, number> = {};
    for (const name of Object.keys(w).filter((n) => n !== 'bf16' && w.bf16 !== undefined)) {
      for (const b of batches) ratios[`${name} decode b${b} vs bf16`] = ratio(name, b);
      ratios[`${name} prefill ${prefillLen} vs bf16`] = w[name]!.prefill.tokPerSec / w.bf16!.prefill.tokPerSec;
    }
    const kvr = kv as Record<string, { tokPerSec: number; kvBlocks: number }>;
    if (kvr.fp8 !== undefined && kvr.bf16 !== undefined) {
      ratios[`fp8 KV decode b${kvBatch} ctx ${kvCtx} vs bf16 KV`] = kvr.fp8.tokPerSec / kvr.bf16.tokPerSec;
      ratios['fp8 KV blocks vs bf16 KV'] = kvr.fp8.kvBlocks / kvr.bf16.kvBlocks;
    }
    const report = { bench: 'native-gpu-fp8', date: new Date().toISOString(), complete, device: deviceLine, gpu: bandwidth?.device, copyGBps, shape, decodeSteps: steps - 2, weights, kv, big, ratios };
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
    return ratios;
  };
  for (const c of configs) {
    const { engine, seconds } = await timedLoad(c.options);
    deviceLine = engine.deviceDescription;
    console.error(`${c.name}: loaded in ${seconds.toFixed(1)} s on ${deviceLine}; ${engine.info.numBlocks} KV blocks`);
    const decode = [];
    for (const b of batches) {
      const d = await decodeAt(engine, b, 128, steps);
      const roofline = b === 1 && copyGBps !== undefined ? d.tokPerSec / ((copyGBps * 1e9) / stepBytes(shape, c.weightBytes, 128, 2)) : undefined;
      decode.push({ ...d, ...(roofline !== undefined ? { roofline } : {}) });
      console.error(`  decode batch ${b}: ${d.tokPerSec.toFixed(1)} tok/s (${d.stepMs.toFixed(2)} ms/step)${roofline !== undefined ? `, ${(100 * roofline).toFixed(1)}% of the roofline` : ''}`);
    }
    const prefill = await prefillOf(engine, prefillLen);
    console.error(`  prefill ${prefillLen}: ${prefill.tokPerSec.toFixed(0)} tok/s`);
    weights[c.name] = { loadSeconds: seconds, quantization: engine.model.quantization, decode, prefill, stepBytes: stepBytes(shape, c.weightBytes, 128, 2) };
    await engine.close();
    await writeReport(false);
  }

  // KV cache: bf16 weights, bf16 against e4m3 pools, batch 64 at an 8k context.
  for (const dtype of ['bf16', 'fp8'] as const) {
    const { engine } = await timedLoad({ ...base, kvCacheDtype: dtype, ...(simt ? { numBlocks: 64 } : {}) });
    const d = await decodeAt(engine, kvBatch, kvCtx, steps);
    kv[dtype] = { ...d, kvDtype: engine.model.kvDtype, kvBlocks: engine.info.numBlocks, kvBytesPerToken: engine.info.kvBytesPerToken };
    console.error(`KV ${dtype}: decode batch ${kvBatch} at ${kvCtx}: ${d.tokPerSec.toFixed(1)} tok/s; ${engine.info.numBlocks} blocks of ${engine.info.kvBytesPerToken} B/token`);
    await engine.close();
  }
  await writeReport(false);

  // 70B: load and decode, or why not.
  if (args.big !== undefined) {
    const s70 = await shapeOf(args.big);
    const fp8Bytes = s70.layers * (s70.hidden * (s70.heads + 2 * s70.kvHeads) * s70.headDim + s70.heads * s70.headDim * s70.hidden + 3 * s70.hidden * s70.inter);
    const bf16Bytes = 2 * 2 * s70.vocab * s70.hidden;
    big = { weightsFp8Bytes: fp8Bytes, weightsBf16Bytes: bf16Bytes, kvBytesPerTokenFp8: 2 * s70.layers * s70.kvHeads * s70.headDim, kvBytesPerTokenBf16: 4 * s70.layers * s70.kvHeads * s70.headDim };
    try {
      const { engine, seconds } = await timedLoad({ ...base, modelDir: args.big, kvCacheDtype: 'fp8', maxBatchTokens: 2048 });
      const d = await decodeAt(engine, 1, 128, Math.min(steps, 12));
      big = { ...big, loaded: true, loadSeconds: seconds, kvBlocks: engine.info.numBlocks, kvTokens: engine.info.numBlocks * engine.info.blockSize, decodeBatch1: d, device: engine.deviceDescription };
      console.error(`70B FP8: loaded in ${seconds.toFixed(0)} s, ${engine.info.numBlocks} KV blocks (fp8), decode batch 1: ${d.tokPerSec.toFixed(1)} tok/s`);
      await engine.close();
    } catch (err) {
      big = { ...big, loaded: false, error: String(err) };
      console.error(`70B FP8: did not load: ${String(err)}`);
    }
    console.error(`70B FP8 memory: ${(fp8Bytes / 1e9).toFixed(1)} GB of e4m3 projections + ${(bf16Bytes / 1e9).toFixed(1)} GB of bf16 embeddings and LM head`);
  }

  const ratios = await writeReport(true);
  console.log(`\nnative-gpu-fp8-bench on ${deviceLine} (copy bandwidth ${copyGBps?.toFixed(0) ?? '?'} GB/s)`);
  console.log(`weights     | ${batches.map((b) => `decode b${b} tok/s`).join(' | ')} | prefill ${prefillLen} tok/s`);
  for (const [name, r] of Object.entries(weights as WeightRuns)) {
    console.log(`${name.padEnd(11)} | ${batches.map((b) => r.decode.find((d) => d.batch === b)!.tokPerSec.toFixed(1)).join(' | ')} | ${r.prefill.tokPerSec.toFixed(0)}`);
  }
  for (const [k, v] of Object.entries(ratios)) console.log(`${k}: ${v.toFixed(2)}x`);
  console.log(`wrote ${out}`);
}

await main();
