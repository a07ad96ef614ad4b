/**
 * Speculative decoding on the native engine (issue 37's three benchmarks), as ratios measured
 * side by side in one run (runs alternate, medians kept), on a random model of a real shape
 * (default Qwen2-0.5B, bf16). Our models are random, so acceptance is a variable to control
 * and is reported beside every speed:
 *
 *   verify    step time of a verify step with k = 1, 2, 4, 8 drafts against a plain decode step,
 *             at batch 1, 8 and 64 (raw engine steps at a 256-token context); with
 *             --verify-long-context N also at batch 1 over N tokens, where the context's KV
 *             outweighs a small model's weights and a verify that read it once per draft row
 *             would cost k + 1 times the attention (the GPU's decode spans read it once)
 *   copy      end to end at batch 1 (EngineLoop: scheduler, policy, drafter) on a copy-heavy
 *             workload: greedy decoding of a random model falls into cycles, which the drafters
 *             predict; tok/s with speculation against plain, with the measured acceptance
 *   reject    a workload whose drafts are almost never accepted, at batch 1, 8 and 64: the prompt
 *             repeats a small token set and sampling (temperature 1) is pushed onto that set by
 *             logit_bias, so the 1-gram lookup always finds a draft and it is right about 1 time
 *             in |set|; the policy should turn speculation off (aim: >= 0.97x plain tok/s)
 *
 *   node --import tsx bench/speculative-bench.ts [--device cpu|cuda|simt] [--threads N] [--shape qwen2-0.5b|llama-1b|llama-8b|tiny]
 *        [--cases verify,copy,reject] [--copy-tokens 256] [--reject-tokens 48] [--reps 3] [--verify-long-context 0] [--out FILE]
 *
 * Writes JSON to bench/results/speculative-<device>.json (or --out). scripts/device/spec-check.sh
 * runs it on a GPU.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { EngineLoop } from '../workers/engine-loop/engine-loop.js';
import type { StepSequence } from '../workers/engines/engine.js';
import { createNativeEngine, type NativeEngine, type NativeEngineOptions } from '../workers/engines/native/index.js';
import { MeasuredStepCost, type SpecTotals } from '../workers/speculative/index.js';
import type { PreprocessedRequest, TokenDelta } from '../proto/wire.js';
import { QWEN2_05B_SHAPE, writeRandomModel, type RandomModelShape } from './fixtures/random-model.js';

const SHAPES: Record<string, RandomModelShape> = {
  'qwen2-0.5b': QWEN2_05B_SHAPE,
  'llama-1b': { hidden: 2048, layers: 16, heads: 32, kvHeads: 8, headDim: 64, inter: 8192, vocab: 128256 },
  'llama-8b': { hidden: 4096, layers: 32, heads: 32, kvHeads: 8, headDim: 128, inter: 14336, vocab: 128256 },
  tiny: { hidden: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, inter: 768, vocab: 4096 },
};

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: 'cpu' },
    threads: { type: 'string', default: String(availableParallelism()) },
    shape: { type: 'string', default: 'qwen2-0.5b' },
    cases: { type: 'string', default: 'verify,copy,reject' },
    'copy-tokens': { type: 'string', default: '256' },
    'reject-tokens': { type: 'string', default: '48' },
    'reject-batches': { type: 'string', default: '1,8,64' },
    'verify-batches': { type: 'string', default: '1,8,64' },
    'verify-long-context': { type: 'string', default: '0' },
    reps: { type: 'string', default: '3' },
    model: { type: 'string' },
    out: { type: 'string' },
  },
});

const device = args.device!;
const shapeName = args.shape!;
const shape = SHAPES[shapeName];
if (shape === undefined) throw new Error(`--shape must be one of ${Object.keys(SHAPES).join(', ')}`);
const reps = Number(args.reps);
const cases = new Set(args.cases!.split(','));
const BLOCK = 16;
const MAX_DRAFTS = 8;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

function engineOptions(modelDir: string, numBlocks: number, speculative?: NativeEngineOptions['speculative']): NativeEngineOptions {
  return {
    modelDir,
    device,
    numBlocks,
    blockSize: BLOCK,
    threads: Number(args.threads),
    maxBatchTokens: 8192,
    maxSeqs: 64,
    ...(speculative !== undefined ? { speculative } : {}),
  };
}

// ---- verify: raw engine steps -------------------------------------------------------------------

/** Step time of plain decode steps and verify steps of k drafts, at a context of `context` tokens. */
async function verifyCase(engine: NativeEngine, batch: number, context: number): Promise<Record<string, number>> {
  const vocab = engine.info.vocabSize;
  const blocksPerSeq = Math.ceil((context + MAX_DRAFTS + 2) / BLOCK);
  const seqs: StepSequence[] = Array.from({ length: batch }, (_, b) => {
    const tokenIds = Int32Array.from({ length: context }, (_, i) => (b * 7919 + i * 104729) % vocab);
    return { seqId: b, tokenIds, startPos: 0, blockTable: Int32Array.from({ length: blocksPerSeq }, (_, i) => b * blocksPerSeq + i), sample: true, sampling: { temperature: 0 }, history: tokenIds, numPromptTokens: context, requestSeed: b };
  });
  // The prompt in chunks within the step budget (maxBatchTokens over the batch); the last samples.
  const chunk = Math.max(BLOCK, Math.floor(4096 / batch / BLOCK) * BLOCK);
  let prefill = undefined as Awaited<ReturnType<NativeEngine['step']>> | undefined;
  for (let at = 0; at < context; at += chunk) {
    const end = Math.min(context, at + chunk);
    prefill = await engine.step({
      sequences: seqs.map((s) => ({ ...s, tokenIds: s.tokenIds.subarray(at, end), startPos: at, sample: end === context })),
    });
  }
  const last = prefill!.sampled.map((s) => s.tokenId);
  const stepOf = (k: number): StepSequence[] =>
    seqs.map((s, b) => {
      const tokenIds = Int32Array.from({ length: 1 + k }, (_, i) => (i === 0 ? last[b]! : (last[b]! + i * 31) % vocab));
      return { ...s, tokenIds, startPos: context, ...(k > 0 ? { numDraftTokens: k } : {}) };
    });
  const ks = [0, 1, 2, 4, 8];
  const times = new Map<number, number[]>(ks.map((k) => [k, []]));
  await engine.step({ sequences: stepOf(0) });  // warm-up at this shape
  for (let r = 0; r < reps; r++) {
    for (const k of ks) {
      const t0 = performance.now();
      await engine.step({ sequences: stepOf(k) });
      times.get(k)!.push(performance.now() - t0);
    }
  }
  const plain = median(times.get(0)!);
  const out: Record<string, number> = { plainStepMs: plain };
  for (const k of ks.slice(1)) {
    out[`k${k}StepMs`] = median(times.get(k)!);
    out[`k${k}Ratio`] = median(times.get(k)!) / plain;
  }
  return out;
}

// ---- end to end through the EngineLoop -----------------------------------------------------------

interface LoopRun {
  tokens: number;
  seconds: number;
  tokensPerSec: number;
  spec?: SpecTotals;
}

/** An EngineLoop over the engine, kept for the whole case as a worker keeps it (the policy learns as it runs). */
function loopOver(engine: NativeEngine, speculate: boolean): EngineLoop {
  return new EngineLoop({
    engine,
    scheduler: { maxNumSeqs: 64, maxNumBatchedTokens: 8192 },
    ...(speculate ? { speculative: { maxDraftTokens: MAX_DRAFTS, cost: new MeasuredStepCost() } } : {}),
  });
}

async function runLoop(loop: EngineLoop, requests: PreprocessedRequest[]): Promise<LoopRun> {
  const before = loop.stats().specTotals;
  const t0 = performance.now();
  const outs = await Promise.all(requests.map(async (r) => {
    let n = 0;
    for await (const d of loop.generate(r, new AbortController().signal) as AsyncIterable<TokenDelta>) n += d.tokenIds.length;
    return n;
  }));
  const seconds = (performance.now() - t0) / 1000;
  const tokens = outs.reduce((a, b) => a + b, 0);
  const after = loop.stats().specTotals;
  // This run's own counts: the loop's totals since the run began.
  const spec =
    after !== undefined && before !== undefined
      ? { drafts: after.drafts - before.drafts, draftTokens: after.draftTokens - before.draftTokens, acceptedTokens: after.acceptedTokens - before.acceptedTokens, acceptedPerPos: after.acceptedPerPos.map((v, i) => v - (before.acceptedPerPos[i] ?? 0)) }
      : undefined;
  return { tokens, seconds, tokensPerSec: tokens / seconds, ...(spec !== undefined ? { spec } : {}) };
}

/** Plain and speculative runs alternated `reps` times; medians of tok/s, acceptance over the speculative runs. */
async function sideBySide(plain: NativeEngine, spec: NativeEngine, requests: (rep: number) => PreprocessedRequest[]) {
  const plainLoop = loopOver(plain, false);
  const specLoop = loopOver(spec, true);
  const a: LoopRun[] = [];
  const b: LoopRun[] = [];
  for (let r = 0; r < reps; r++) {
    a.push(await runLoop(plainLoop, requests(r)));
    b.push(await runLoop(specLoop, requests(r)));
  }
  const t = specLoop.stats().specTotals!;
  return {
    plainTokensPerSec: median(a.map((x) => x.tokensPerSec)),
    specTokensPerSec: median(b.map((x) => x.tokensPerSec)),
    ratio: median(b.map((x) => x.tokensPerSec)) / median(a.map((x) => x.tokensPerSec)),
    runs: { plain: a.map((x) => x.tokensPerSec), spec: b.map((x) => x.tokensPerSec), acceptance: b.map((x) => (x.spec!.draftTokens > 0 ? x.spec!.acceptedTokens / x.spec!.draftTokens : null)) },
    acceptance: t.draftTokens > 0 ? t.acceptedTokens / t.draftTokens : null,
    meanTokensPerVerify: t.drafts > 0 ? 1 + t.acceptedTokens / t.drafts : null,
    drafts: t.drafts,
    draftTokens: t.draftTokens,
    acceptedTokens: t.acceptedTokens,
    acceptedPerPos: t.acceptedPerPos,
  };
}

let requestCounter = 0;
function req(tokenIds: number[], maxTokens: number, sampling: PreprocessedRequest['sampling']): PreprocessedRequest {
  return { requestId: `bench-${requestCounter++}`, model: 'bench', tokenIds, sampling, stop: { maxTokens, stopTokenIds: [], ignoreEos: true } };
}

async function main(): Promise<void> {
  const loadAtStart = loadavg()[0];
  let modelDir = args.model;
  let tmp: string | undefined;
  if (modelDir === undefined) {
    tmp = await mkdtemp(join(tmpdir(), 'tandem-spec-bench-'));
    modelDir = tmp;
    await writeRandomModel(modelDir, shape!, 'bf16');
  }
  const results: Record<string, unknown> = {};
  // The report so far: written after each case, so a run cut short by its step's timeout
  // (scripts/device/run-all.sh) still leaves the cases it finished ("complete": false).
  const file = args.out ?? join(import.meta.dirname, 'results', `speculative-${device}.json`);
  const writeReport = async (complete: boolean) => {
    const report = {
      bench: 'speculative',
      date: new Date().toISOString(),
      complete,
      device,
      machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: availableParallelism(), loadAverage1mStart: loadAtStart, loadAverage1m: loadavg()[0] },
      model: { shape: shapeName, ...shape, weightsDtype: 'bf16' },
      threads: Number(args.threads),
      reps,
      maxDrafts: MAX_DRAFTS,
      results,
    };
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
    return report;
  };
  try {
    const longContext = Number(args['verify-long-context']);
    if (!Number.isInteger(longContext) || longContext < 0) throw new Error('--verify-long-context must be a whole number of tokens (0: off)');
    const numBlocks = Math.max(64 * Math.ceil((512 + Number(args['copy-tokens']) + MAX_DRAFTS + 8) / BLOCK), Math.ceil((longContext + MAX_DRAFTS + 2) / BLOCK));
    const plain = await createNativeEngine(engineOptions(modelDir, numBlocks));
    const vocab = plain.info.vocabSize;

    if (cases.has('verify')) {
      const verify: Record<string, unknown> = {};
      for (const batch of args['verify-batches']!.split(',').map(Number)) {
        verify[`batch${batch}`] = await verifyCase(plain, batch, 256);
        console.error(`verify batch ${batch}: ${JSON.stringify(verify[`batch${batch}`])}`);
      }
      if (longContext > 0) {
        verify[`batch1Context${longContext}`] = await verifyCase(plain, 1, longContext);
        console.error(`verify batch 1, context ${longContext}: ${JSON.stringify(verify[`batch1Context${longContext}`])}`);
      }
      results.verify = verify;
      await writeReport(false);
    }

    if (cases.has('copy')) {
      // A code-edit-like prompt (a block of text, then the same block again, cut short) and greedy
      // decoding: the random model's continuation cycles, and the drafter follows the cycle.
      // Each rep its own prompt, so the suffix drafter's global tree never holds the very output it is asked for.
      const promptOf = (rep: number): number[] => {
        const block = Array.from({ length: 120 }, (_, i) => (i * 7907 + 11 + rep * 104729) % vocab);
        return [...block, ...block.slice(0, 60)];
      };
      const out: Record<string, unknown> = {};
      for (const method of ['ngram', 'suffix'] as const) {
        const spec = await createNativeEngine(engineOptions(modelDir, numBlocks, { method, numSpeculativeTokens: MAX_DRAFTS, promptLookupMin: 2, promptLookupMax: 5 }));
        out[method] = await sideBySide(plain, spec, (rep) => [req(promptOf(rep), Number(args['copy-tokens']), { temperature: 0 })]);
        console.error(`copy batch 1, ${method}: ${JSON.stringify(out[method])}`);
        await spec.close();
      }
      results.copy = out;
      await writeReport(false);
    }

    if (cases.has('reject')) {
      // Sampling pushed onto a 40-token set: drafts from the 1-gram lookup, right about 1 time in 40.
      const set = Array.from({ length: 40 }, (_, i) => (i * 3571 + 101) % vocab);
      const bias: Array<[number, number]> = set.map((t) => [t, 30]);
      const prompt = Array.from({ length: 200 }, (_, i) => set[(i * 7) % set.length]!);
      const spec = await createNativeEngine(engineOptions(modelDir, numBlocks, { method: 'ngram', numSpeculativeTokens: MAX_DRAFTS, promptLookupMin: 1, promptLookupMax: 3 }));
      const out: Record<string, unknown> = {};
      for (const batch of args['reject-batches']!.split(',').map(Number)) {
        const requests = (rep: number) => Array.from({ length: batch }, (_, i) => req(prompt, Number(args['reject-tokens']), { temperature: 1, seed: 7 + i + 1000 * rep, logitBias: bias }));
        out[`batch${batch}`] = await sideBySide(plain, spec, requests);
        console.error(`reject batch ${batch}: ${JSON.stringify(out[`batch${batch}`])}`);
      }
      await spec.close();
      results.reject = out;
      await writeReport(false);
    }
    await plain.close();

    const report = await writeReport(true);
    console.log(JSON.stringify(report, null, 2));
  } finally {
    if (tmp !== undefined) await rm(tmp, { recursive: true, force: true });
  }
}

await main();
