/**
 * Embeddings throughput on the native CPU engine (issue 26): sequences/s at batch 32 of
 * 128-token inputs through the pooling step (NativeEngine.embed: forward, final norm, mean
 * pooling, L2 normalization), and, in the same run on the same model directory, Hugging Face
 * `transformers` (AutoModel forward + the same pooling, torch on the CPU, the same thread count)
 * when python3 can import torch and transformers; otherwise the report says it was not run and why.
 *
 * The model is a random Qwen2-shaped encoder-sized model (--shape small: hidden 384, 6 layers,
 * ~35M parameters, the size of all-MiniLM-L12; --shape 0.5b: Qwen2-0.5B) in f32.
 * Writes bench/results/embeddings.json and bench/results/embeddings.md (a table).
 *
 *   node --import tsx bench/embeddings.ts [--threads N] [--batch 32] [--tokens 128] [--batches 5]
 *        [--shape small|0.5b] [--model DIR (reuse)] [--keep-model]
 */
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { SeededRandom } from '../runtime/random.js';
import { createNativeEngine } from '../workers/engines/native/index.js';
import { writeRandomModel, type RandomModelShape } from './fixtures/random-model.js';

const SHAPES: Record<string, RandomModelShape> = {
  small: { hidden: 384, layers: 6, heads: 6, kvHeads: 2, headDim: 64, inter: 1536, vocab: 32000 },
  '0.5b': { hidden: 896, layers: 24, heads: 14, kvHeads: 2, headDim: 64, inter: 4864, vocab: 151936 },
};

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(availableParallelism()) },
    batch: { type: 'string', default: '32' },
    tokens: { type: 'string', default: '128' },
    batches: { type: 'string', default: '5' },
    shape: { type: 'string', default: 'small' },
    model: { type: 'string' },
    'keep-model': { type: 'boolean', default: false },
  },
});

interface Side {
  available: boolean;
  reason?: string;
  seqsPerSec?: number;
  /** Per measured batch, seconds. */
  batchSeconds?: number[];
  seqsPerCpuSec?: number;
  version?: string;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function ours(modelDir: string, inputs: number[][], threads: number, batches: number): Promise<Side> {
  const tokens = inputs[0]!.length;
  const engine = await createNativeEngine({ modelDir, threads, blockSize: 16, numBlocks: inputs.length * Math.ceil(tokens / 16) + 8 });
  try {
    const flat = Int32Array.from(inputs.flat());
    const lengths = Int32Array.from(inputs.map((i) => i.length));
    await engine.embed(flat, lengths, 'mean', true); // warm-up: scratch buffers, page faults
    const seconds: number[] = [];
    let cpuMs = 0;
    for (let b = 0; b < batches; b++) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      const v = await engine.embed(flat, lengths, 'mean', true);
      seconds.push((performance.now() - t0) / 1000);
      const c = process.cpuUsage(c0);
      cpuMs += (c.user + c.system) / 1000;
      if (v.length !== inputs.length * engine.model.hiddenSize) throw new Error('wrong output size');
    }
    return { available: true, seqsPerSec: inputs.length / median(seconds), batchSeconds: seconds, seqsPerCpuSec: (inputs.length * batches) / (cpuMs / 1000) };
  } finally {
    await engine.close();
  }
}

function transformers(modelDir: string, inputs: number[][], threads: number, batches: number): Side {
  const probe = spawnSync('python3', ['-c', 'import torch, transformers; print(transformers.__version__)'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    const missing = /No module named '([^']+)'/.exec(probe.stderr)?.[1] ?? (probe.error ? 'python3' : 'torch/transformers');
    return { available: false, reason: `python3 cannot import ${missing} on this machine (pip install torch transformers to compare)` };
  }
  const run = spawnSync('python3', [join(import.meta.dirname, 'embeddings_transformers.py'), modelDir, String(threads), String(batches)], { input: JSON.stringify(inputs), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (run.status !== 0) return { available: false, reason: `transformers run failed: ${run.stderr.trim().split('\n').at(-1)}` };
  return { available: true, ...(JSON.parse(run.stdout) as Omit<Side, 'available'>) };
}

async function main(): Promise<void> {
  const threads = Number(args.threads);
  const batch = Number(args.batch);
  const tokens = Number(args.tokens);
  const batches = Number(args.batches);
  const shape = SHAPES[args.shape];
  if (!shape) throw new Error(`--shape must be one of ${Object.keys(SHAPES).join(', ')}`);
  const own = args.model === undefined;
  const modelDir = args.model ?? (await mkdtemp(join(tmpdir(), 'tandem-embed-bench-')));
  try {
    if (own) await writeRandomModel(modelDir, shape, 'f32');
    const rng = new SeededRandom(26);
    const inputs = Array.from({ length: batch }, () => Array.from({ length: tokens }, () => rng.int(0, shape.vocab)));
    const tandem = await ours(modelDir, inputs, threads, batches);
    const hf = transformers(modelDir, inputs, threads, batches);
    const report = {
      bench: 'embeddings',
      date: new Date().toISOString(),
      machine: { cpu: cpus()[0]?.model, cores: availableParallelism(), loadavg: loadavg().map((l) => Number(l.toFixed(2))) },
      workload: { batch, tokensPerInput: tokens, measuredBatches: batches, pooling: 'mean', normalize: true, threads },
      model: { shape: args.shape, ...shape, weightsDtype: 'f32', computeDtype: 'f32' },
      tandem,
      transformers: hf,
      ...(hf.available && hf.seqsPerSec ? { ratio: tandem.seqsPerSec! / hf.seqsPerSec } : {}),
    };
    const fmt = (s: Side) => (s.available ? s.seqsPerSec!.toFixed(1) : `not run: ${s.reason}`);
    const md = [
      `# Embeddings throughput (${report.date.slice(0, 10)})`,
      '',
      `Batch ${batch} × ${tokens} tokens, mean pooling + normalize, ${threads} threads, ${report.machine.cpu} (${report.machine.cores} cores, load ${report.machine.loadavg.join(' ')}), model shape '${args.shape}' (hidden ${shape.hidden}, ${shape.layers} layers, f32).`,
      '',
      '| engine | sequences/s (median of batches) | sequences per CPU-second |',
      '|---|---|---|',
      `| Tandem native CPU (Engine::embed) | ${fmt(tandem)} | ${tandem.seqsPerCpuSec?.toFixed(1) ?? ''} |`,
      `| transformers (torch CPU) | ${fmt(hf)} | ${hf.seqsPerCpuSec?.toFixed(1) ?? ''} |`,
      '',
    ].join('\n');
    const dir = join(import.meta.dirname, 'results');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'embeddings.json'), `${JSON.stringify(report, null, 2)}\n`);
    await writeFile(join(dir, 'embeddings.md'), md);
    process.stdout.write(`${md}\n`);
  } finally {
    if (own && !args['keep-model']) await rm(modelDir, { recursive: true, force: true });
  }
}

await main();
