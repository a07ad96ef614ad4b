/**
 * Native CPU engine benchmark on a 0.5B-shaped random model (Qwen2-0.5B shape: hidden 896,
 * 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, tied embeddings).
 * Reports prefill and decode tokens/s at batch 1 and 8, and the share of a step's wall time
 * spent in TypeScript (marshalling the batch and unmarshalling results) against the native
 * call. A long-prompt case (batch 1, --long-prompt tokens, default 1024; 0 skips it) measures
 * prefill where attention is a visible share of the FLOPs, and decode at that context.
 * Writes JSON to bench/results/native-cpu-bench.json.
 *
 *   node --import tsx bench/native-cpu-bench.ts [--threads N] [--prompt 64] [--decode-steps 8]
 *        [--long-prompt 1024] [--only-long] [--dtype bf16|f32] [--model DIR (reuse)] [--keep-model]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { StepSequence } from '../workers/engines/engine.js';
import { benchSequences } from './fixtures/step-sequences.js';
import { createNativeEngine, type NativeEngine } from '../workers/engines/native/index.js';
import { QWEN2_05B_SHAPE as SHAPE, writeRandomModel as writeRandomShapedModel } from './fixtures/random-model.js';

const writeRandomModel = (dir: string, dtype: 'bf16' | 'f32') => writeRandomShapedModel(dir, SHAPE, dtype);

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(availableParallelism()) },
    prompt: { type: 'string', default: '64' },
    'decode-steps': { type: 'string', default: '8' },
    'long-prompt': { type: 'string', default: '1024' },
    'only-long': { type: 'boolean', default: false },
    dtype: { type: 'string', default: 'bf16' },
    model: { type: 'string' },
    'keep-model': { type: 'boolean', default: false },
  },
});

interface Measure {
  tokensPerSec: number;
  /** Tokens per CPU-second of this process (all threads): robust to other load on the machine. */
  tokensPerCpuSec: number;
  stepMs: number;
  tsShare: number;
  steps: number;
}

async function timedStep(engine: NativeEngine, seqs: StepSequence[]): Promise<{ ms: number; cpuMs: number; tsMs: number; tokens: number[] }> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const r = await engine.step({ sequences: seqs });
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const t = engine.lastTiming;
  return { ms, cpuMs: (c.user + c.system) / 1000, tsMs: t.marshalMs + t.unmarshalMs, tokens: r.sampled.map((s) => s.tokenId) };
}

async function run(engine: NativeEngine, batch: number, promptLen: number, decodeSteps: number): Promise<{ prefill: Measure; decode: Measure }> {
  const blocksPerSeq = Math.ceil((promptLen + decodeSteps + 1) / engine.info.blockSize);
  const seqs = benchSequences(batch, promptLen, engine.info.vocabSize, blocksPerSeq);
  const pre = await timedStep(engine, seqs);
  const prefill = { tokensPerSec: (batch * promptLen) / (pre.ms / 1000), tokensPerCpuSec: (batch * promptLen) / (pre.cpuMs / 1000), stepMs: pre.ms, tsShare: pre.tsMs / pre.ms, steps: 1 };
  let last = pre.tokens;
  let totalMs = 0;
  let totalCpu = 0;
  let totalTs = 0;
  for (let i = 0; i < decodeSteps; i++) {
    const step = seqs.map((s, b) => ({ ...s, tokenIds: Int32Array.of(last[b]!), startPos: promptLen + i }));
    const r = await timedStep(engine, step);
    totalMs += r.ms;
    totalCpu += r.cpuMs;
    totalTs += r.tsMs;
    last = r.tokens;
  }
  const decode = { tokensPerSec: (batch * decodeSteps) / (totalMs / 1000), tokensPerCpuSec: (batch * decodeSteps) / (totalCpu / 1000), stepMs: totalMs / decodeSteps, tsShare: totalTs / totalMs, steps: decodeSteps };
  return { prefill, decode };
}

async function main(): Promise<void> {
  // The bench machine is often shared: record the load it ran under, before and after.
  const loadAtStart = loadavg()[0];
  const threads = Number(args.threads);
  const promptLen = Number(args.prompt);
  const decodeSteps = Number(args['decode-steps']);
  const longPrompt = Number(args['long-prompt']);
  const dtype = args.dtype === 'f32' ? 'f32' : 'bf16';
  let modelDir = args.model;
  let tmp: string | undefined;
  if (modelDir === undefined) {
    tmp = await mkdtemp(join(tmpdir(), 'tandem-bench-05b-'));
    modelDir = tmp;
    const t0 = performance.now();
    await writeRandomModel(modelDir, dtype);
    console.error(`wrote random ${dtype} model to ${modelDir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
  try {
    const t0 = performance.now();
    const numBlocks = 8 * Math.ceil((promptLen + decodeSteps + 1) / 16) + Math.ceil((longPrompt + decodeSteps + 1) / 16) + 8;
    const engine = await createNativeEngine({ modelDir, numBlocks, blockSize: 16, threads });
    const loadSec = (performance.now() - t0) / 1000;
    console.error(`loaded in ${loadSec.toFixed(1)} s (${engine.model.backend}, ${engine.model.threads} threads)`);
    await engine.step({ sequences: benchSequences(1, 4, engine.info.vocabSize, 1) }); // warm-up
    const results: Record<string, { prefill: Measure; decode: Measure }> = {};
    const cases: Array<[string, number, number]> = args['only-long'] ? [] : [[`batch1`, 1, promptLen], [`batch8`, 8, promptLen]];
    if (longPrompt > 0) cases.push([`long${longPrompt}`, 1, longPrompt]);
    for (const [name, batch, prompt] of cases) {
      results[name] = await run(engine, batch, prompt, decodeSteps);
      const r = results[name]!;
      console.error(
        `${name} (batch ${batch}, prompt ${prompt}): prefill ${r.prefill.tokensPerSec.toFixed(1)} tok/s (${r.prefill.stepMs.toFixed(0)} ms), ` +
          `decode ${r.decode.tokensPerSec.toFixed(2)} tok/s (${r.decode.stepMs.toFixed(0)} ms/step); per CPU-second: ` +
          `prefill ${r.prefill.tokensPerCpuSec.toFixed(1)}, decode ${r.decode.tokensPerCpuSec.toFixed(2)}; ` +
          `TS share prefill ${(100 * r.prefill.tsShare).toFixed(3)}% decode ${(100 * r.decode.tsShare).toFixed(3)}%`,
      );
    }
    await engine.close();
    const report = {
      bench: 'native-cpu',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: availableParallelism(), loadAverage1mStart: loadAtStart, loadAverage1m: loadavg()[0] },
      model: { shape: 'Qwen2-0.5B', ...SHAPE, weightsDtype: dtype, computeDtype: 'f32' },
      threads,
      promptLen,
      longPrompt,
      decodeSteps,
      loadSeconds: loadSec,
      results,
    };
    await mkdir(join(import.meta.dirname, 'results'), { recursive: true });
    const out = join(import.meta.dirname, 'results', 'native-cpu-bench.json');
    await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
    console.log(JSON.stringify(report, null, 2));
  } finally {
    if (tmp !== undefined && !args['keep-model']) await rm(tmp, { recursive: true, force: true });
  }
}

await main();
