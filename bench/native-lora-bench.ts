/**
 * Multi-LoRA on the native CPU engine: a 0.5B-shaped random model (bench/fixtures/random-model.ts)
 * with rank-16 adapters on all seven linear layers. Measures the decode step time of a batch of
 * 16 sequences under the base model alone and with 1, 4 and 16 distinct adapters (sequences
 * grouped by adapter, as the SGMV kernel expects), and the cost of loading one adapter (reading
 * and checking the PEFT files, then the engine's load into a slot).
 * Writes bench/results/native-lora-bench.json and prints a table.
 *
 *   node --import tsx bench/native-lora-bench.ts [--threads N] [--rank 16] [--steps 5] [--prompt 16] [--model DIR]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { StepSequence } from '../workers/engines/engine.js';
import { createNativeEngine, type NativeEngine } from '../workers/engines/native/index.js';
import { makeTinyLora, readPeftAdapter, type LoraAdapterSpec } from '../workers/lora/index.js';
import { benchSequences } from './fixtures/step-sequences.js';
import { QWEN2_05B_SHAPE as SHAPE, writeRandomModel as writeRandomShapedModel } from './fixtures/random-model.js';

const writeRandomModel = (dir: string, dtype: 'bf16' | 'f32') => writeRandomShapedModel(dir, SHAPE, dtype);

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(availableParallelism()) },
    rank: { type: 'string', default: '16' },
    steps: { type: 'string', default: '5' },
    prompt: { type: 'string', default: '16' },
    model: { type: 'string' },
  },
});

const BATCH = 16;
const ADAPTERS = 16;

interface Case {
  distinctAdapters: number;
  stepMs: number;
  stepCpuMs: number;
  stepMsAll: number[];
  vsBase?: number;
}

async function decodeCase(engine: NativeEngine, distinct: number, promptLen: number, steps: number): Promise<Case> {
  const blocksPerSeq = Math.ceil((promptLen + steps + 2) / 16);
  const seqs: StepSequence[] = benchSequences(BATCH, promptLen, SHAPE.vocab, blocksPerSeq);
  // Sequences grouped by adapter: distinct = 4 gives slots 0,0,0,0,1,1,1,1,...
  if (distinct > 0) seqs.forEach((s, b) => (s.loraSlot = Math.floor((b * distinct) / BATCH)));
  let r = await engine.step({ sequences: seqs });
  const times: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i <= steps; i++) {
    const decode = seqs.map((s, b) => ({ ...s, tokenIds: Int32Array.of(r.sampled[b]!.tokenId), startPos: promptLen + i }));
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    r = await engine.step({ sequences: decode });
    const ms = performance.now() - t0;
    const c = process.cpuUsage(c0);
    if (i > 0) {
      times.push(ms);
      cpu.push((c.user + c.system) / 1000);
    }
  }
  return { distinctAdapters: distinct, stepMs: median(times), stepCpuMs: median(cpu), stepMsAll: times.map((t) => Math.round(t * 10) / 10) };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  const threads = Number(args.threads);
  const rank = Number(args.rank);
  const steps = Number(args.steps);
  const promptLen = Number(args.prompt);
  const tmp = await mkdtemp(join(tmpdir(), 'tandem-lora-bench-'));
  try {
    const modelDir = args.model ?? join(tmp, 'model');
    if (args.model === undefined) {
      await mkdir(modelDir, { recursive: true });
      await writeRandomModel(modelDir, 'bf16');
    }
    const dims = { hiddenSize: SHAPE.hidden, intermediateSize: SHAPE.inter, numLayers: SHAPE.layers, numHeads: SHAPE.heads, numKvHeads: SHAPE.kvHeads, headDim: SHAPE.headDim };
    const specs: LoraAdapterSpec[] = [];
    for (let i = 0; i < ADAPTERS; i++) {
      const dir = await makeTinyLora({ dims, outDir: join(tmp, `lora-${i}`), rank, seed: 100 + i, dtype: 'bf16' });
      specs.push(await readPeftAdapter(dir));
    }
    const engine = await createNativeEngine({ modelDir, numBlocks: BATCH * 4 + 8, blockSize: 16, threads });
    const loads: number[] = [];
    const reads: number[] = [];
    for (let i = 0; i < ADAPTERS; i++) {
      const t0 = performance.now();
      const spec = await readPeftAdapter(specs[i]!.dir, { maxLoraRank: rank });
      const t1 = performance.now();
      await engine.loadLora(i, spec);
      reads.push(t1 - t0);
      loads.push(performance.now() - t1);
    }
    const cases: Case[] = [];
    for (const distinct of [0, 1, 4, 16]) {
      const c = await decodeCase(engine, distinct, promptLen, steps);
      cases.push(c);
      process.stderr.write(`distinct ${distinct}: ${c.stepMs.toFixed(1)} ms/step\n`);
    }
    // The base model again at the end: the machine's load drifts (other processes share it).
    const baseAfter = await decodeCase(engine, 0, promptLen, steps);
    await engine.close();
    const base = Math.min(cases[0]!.stepMs, baseAfter.stepMs);
    for (const c of cases) c.vsBase = Math.round((c.stepMs / base) * 1000) / 1000;
    const report = {
      bench: 'native-lora-bench',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model, cores: availableParallelism(), loadavg: loadavg(), threads },
      model: { shape: 'Qwen2-0.5B', ...SHAPE, weightsDtype: 'bf16', computeDtype: 'f32' },
      adapters: { count: ADAPTERS, rank, targets: 'q,k,v,o,gate,up,down', dtype: 'bf16', weightBytesEach: specs[0]!.weightBytes },
      batch: BATCH,
      promptTokens: promptLen,
      decodeSteps: steps,
      baseStepMsAfter: baseAfter.stepMs,
      cases,
      load: { readAndCheckMs: median(reads), engineLoadMs: median(loads), totalMs: median(reads) + median(loads) },
    };
    const out = join(import.meta.dirname, 'results', 'native-lora-bench.json');
    await mkdir(join(import.meta.dirname, 'results'), { recursive: true });
    await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
    process.stdout.write(`\n| distinct adapters in a batch of ${BATCH} | decode step (ms, median) | vs base |\n|---|---|---|\n`);
    for (const c of cases) process.stdout.write(`| ${c.distinctAdapters === 0 ? 'base model' : c.distinctAdapters} | ${c.stepMs.toFixed(1)} | ${c.vsBase!.toFixed(2)}x |\n`);
    process.stdout.write(`\nadapter load (rank ${rank}, ${(specs[0]!.weightBytes / 1e6).toFixed(1)} MB): read+check ${median(reads).toFixed(1)} ms, engine ${median(loads).toFixed(1)} ms\n${out}\n`);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

await main();
