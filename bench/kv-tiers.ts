/**
 * KV tiers benchmark (issue 25): multi-turn chat sessions whose total context exceeds the engine
 * pool (G1) several times over, with a think time between turns, run against G1 alone, G1+G2
 * (host tier) and G1+G2+G3 (a small host tier over a disk tier) side by side in one run, on the
 * mocker (H100-like tier bandwidths, an 8B-shaped 128 KiB of KV per token) and on the native CPU
 * engine (the tiny model, real copies, a real disk directory).
 *
 *   node --import tsx bench/kv-tiers.ts [--quick] [--skip-native]
 *
 * Each configuration drives one in-process EngineLoop (scheduler + block manager + engine + tier
 * manager; no HTTP, so the numbers are the cache's, not the frontend's). Per configuration:
 * TTFT p50/p90 (the mocker's in simulated ms = wall × speedup), the cached-token ratio (tokens
 * the worker reported as cached, over prompt tokens) against the infinite-cache ceiling (every
 * full block of a session's previous turn reused), output throughput, and tier counters. The
 * native run also measures onboard time per block (host and disk) against recompute time per
 * block. Writes bench/results/kv-tiers.json and prints a table.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PolynomialPerfModel } from '../perf-model/index.js';
import type { PreprocessedRequest } from '../proto/wire.js';
import { SeededRandom } from '../runtime/random.js';
import { EngineLoop } from '../workers/engine-loop/engine-loop.js';
import type { Engine } from '../workers/engines/engine.js';
import { MockerEngine } from '../workers/engines/mocker/index.js';
import { createKvTiers, hostPoolTierTarget, simulatedTierTarget, type KvTierManager, type KvTierOptions, type KvTierTarget } from '../workers/kv-tiers/index.js';
import { makeTinyModel } from '../workers/models/index.js';
import { summarize } from './loadgen/stats.js';

interface Workload {
  sessions: number;
  turns: number;
  userTokens: number;
  /** Tokens of the first turn (a document or tool context), default userTokens. */
  firstTurnTokens?: number;
  outputTokens: number;
  thinkMs: number;
  vocab: number;
  blockSize: number;
}

interface RunResult {
  config: string;
  requests: number;
  ttftP50Ms: number;
  ttftP90Ms: number;
  cachedRatio: number;
  ceilingRatio: number;
  outputTokPerSec: number;
  wallMs: number;
  tiers?: ReturnType<KvTierManager['stats']>;
}

/**
 * G3 runs with --kv-disk-min-reuse 0: in these sessions a block is reused once per later turn,
 * but a G2 no larger than G1 pushes it out before its second hit, so the default (2) would keep
 * nearly everything off the disk (measured: 6 disk onboards on the native run).
 */
const G3_MIN_REUSE = 0;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs every session concurrently: turn t sends the whole history plus new user tokens. */
async function runWorkload(loop: EngineLoop, w: Workload, timeScale: number, config: string, tiers?: KvTierManager): Promise<RunResult> {
  const ttfts: number[] = [];
  let prompt = 0;
  let cached = 0;
  let ceiling = 0;
  let outputs = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: w.sessions }, async (_, s) => {
      const rng = new SeededRandom(1234, s);
      const history: number[] = [];
      let reusable = 0;
      // Sessions start spread over one think time, so they do not move in lock step.
      await sleep((rng.next() * w.thinkMs) / timeScale);
      for (let t = 0; t < w.turns; t++) {
        const n = t === 0 ? (w.firstTurnTokens ?? w.userTokens) : w.userTokens;
        for (let i = 0; i < n; i++) history.push(Math.floor(rng.next() * w.vocab));
        const req: PreprocessedRequest = {
          requestId: `s${s}-t${t}`,
          model: 'bench',
          tokenIds: [...history],
          sampling: { temperature: 0 },
          stop: { maxTokens: w.outputTokens, stopTokenIds: [], ignoreEos: true },
        };
        const t0 = performance.now();
        let first = true;
        for await (const d of loop.generate(req, new AbortController().signal)) {
          if (first && d.tokenIds.length > 0) {
            ttfts.push((performance.now() - t0) * timeScale);
            first = false;
          }
          history.push(...d.tokenIds);
          outputs += d.tokenIds.length;
          if (d.finishReason !== undefined && d.usage) cached += d.usage.cachedTokens;
        }
        prompt += req.tokenIds.length;
        // What an infinite cache could have served: the previous turn's full blocks (one token left to compute).
        ceiling += Math.min(reusable, Math.floor((req.tokenIds.length - 1) / w.blockSize) * w.blockSize);
        reusable = Math.floor(history.length / w.blockSize) * w.blockSize;
        await sleep((w.thinkMs * (0.5 + rng.next())) / timeScale);
      }
    }),
  );
  const wallMs = performance.now() - start;
  await tiers?.idle();
  const st = summarize(ttfts);
  return {
    config,
    requests: ttfts.length,
    ttftP50Ms: round(st.p50),
    ttftP90Ms: round(st.p90),
    cachedRatio: round(cached / prompt, 4),
    ceilingRatio: round(ceiling / prompt, 4),
    outputTokPerSec: round(outputs / ((wallMs * timeScale) / 1000)),
    wallMs: Math.round(wallMs),
    ...(tiers !== undefined ? { tiers: tiers.stats() } : {}),
  };
}

function round(v: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

type Configs = Array<{ name: string; tiers?: KvTierOptions }>;

async function runConfigs(
  configs: Configs,
  open: () => Promise<Engine>,
  target: (engine: Engine) => KvTierTarget,
  w: Workload,
  timeScale: number,
): Promise<RunResult[]> {
  const out: RunResult[] = [];
  for (const c of configs) {
    const engine = await open();
    const tiers = c.tiers !== undefined ? await createKvTiers(c.tiers, target(engine)) : undefined;
    const loop = new EngineLoop({ engine, ...(tiers ? { kvTiers: tiers } : {}) });
    const r = await runWorkload(loop, w, timeScale, c.name, tiers);
    await loop.close();
    out.push(r);
    console.error(`  ${c.name}: ttft p90 ${r.ttftP90Ms} ms, cached ${r.cachedRatio} (ceiling ${r.ceilingRatio})`);
  }
  return out;
}

function table(title: string, rows: RunResult[]): string {
  const lines = [title, 'config              reqs  ttft p50  ttft p90  cached  ceiling  out tok/s  onboard host/disk blk'];
  for (const r of rows) {
    lines.push(
      `${r.config.padEnd(18)} ${String(r.requests).padStart(5)} ${r.ttftP50Ms.toFixed(1).padStart(9)} ${r.ttftP90Ms.toFixed(1).padStart(9)} ${r.cachedRatio.toFixed(3).padStart(7)} ${r.ceilingRatio.toFixed(3).padStart(8)} ${r.outputTokPerSec.toFixed(0).padStart(10)}  ${r.tiers ? `${r.tiers.onboardHostBlocks}/${r.tiers.onboardDiskBlocks}` : '-'}`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const quick = args.includes('--quick');
  const skipNative = args.includes('--skip-native');
  const here = dirname(fileURLToPath(import.meta.url));
  const tmp = mkdtempSync(join(tmpdir(), 'tandem-kv-tiers-bench-'));
  const report: Record<string, unknown> = { date: new Date().toISOString(), quick };
  try {
    // ---- mocker: H100-like tiers, 8B-shaped blocks (16 tokens × 128 KiB = 2 MiB) ----
    const BS = 16;
    const mockBlocks = quick ? 800 : 1200; // G1 = 12800 / 19200 tokens
    const kvBytesPerToken = 131072;
    const blockBytes = kvBytesPerToken * BS;
    // Think time well above a turn's service time, so the sessions active at once fit G1: the
    // cache, not the pool's concurrency, is what the tiers change.
    // Long contexts (up to ~6k tokens), where a prefill is worth saving. Real time (speedup 1):
    // timer noise is small against the steps, which a speedup would multiply.
    const mw: Workload = quick
      ? { sessions: 8, turns: 6, userTokens: 1024, outputTokens: 16, thinkMs: 3000, vocab: 32000, blockSize: BS }
      : { sessions: 6, turns: 6, userTokens: 2048, outputTokens: 16, thinkMs: 3000, vocab: 32000, blockSize: BS };
    const workingSetOf = (w: Workload) => w.sessions * ((w.firstTurnTokens ?? w.userTokens) + (w.turns - 1) * w.userTokens + w.turns * w.outputTokens);
    const workingSet = workingSetOf(mw);
    const speedup = 1;
    const perf = new PolynomialPerfModel();
    const gib = 1024 ** 3;
    const mockConfigs: Configs = [
      { name: 'G1' },
      { name: 'G1+G2', tiers: { hostCacheBytes: Math.ceil((workingSet / BS) * 1.25) * blockBytes } },
      { name: 'G1+G2+G3', tiers: { hostCacheBytes: mockBlocks * blockBytes, diskCacheBytes: 64 * gib, diskMinReuse: G3_MIN_REUSE } },
    ];
    console.error(`mocker: ${mw.sessions} sessions × ${mw.turns} turns, working set ${workingSet} tokens = ${(workingSet / (mockBlocks * BS)).toFixed(1)}× G1 (${mockBlocks * BS} tokens)`);
    const mocker = await runConfigs(
      mockConfigs,
      async () => new MockerEngine({ numBlocks: mockBlocks, blockSize: BS, speedupRatio: speedup, perfModel: perf }),
      (e) => simulatedTierTarget(blockBytes, speedup, perf),
      mw,
      speedup,
    );
    report.mocker = { g3DiskMinReuse: G3_MIN_REUSE, workload: mw, g1Tokens: mockBlocks * BS, workingSetTokens: workingSet, kvBytesPerToken, bandwidths: 'H100_TIER_BANDWIDTHS (host 25 GB/s, disk 3 GB/s)', speedupRatio: speedup, results: mocker };
    console.log(table('mocker (H100-like tiers; TTFT in simulated ms)', mocker));

    // Agentic: a long first context (an 8k-token document or tool state), then short turns.
    if (!args.includes('--skip-agentic')) {
      const aBlocks = 1400; // G1 = 22400 tokens
      const aw: Workload = { sessions: 8, turns: 8, firstTurnTokens: 8192, userTokens: 256, outputTokens: 16, thinkMs: 3000, vocab: 32000, blockSize: BS };
      const aws = workingSetOf(aw);
      const agenticConfigs: Configs = [
        { name: 'G1' },
        { name: 'G1+G2', tiers: { hostCacheBytes: Math.ceil((aws / BS) * 1.25) * blockBytes } },
        { name: 'G1+G2+G3', tiers: { hostCacheBytes: aBlocks * blockBytes, diskCacheBytes: 64 * gib, diskMinReuse: G3_MIN_REUSE } },
      ];
      console.error(`mocker agentic: ${aw.sessions} sessions × ${aw.turns} turns, working set ${aws} tokens = ${(aws / (aBlocks * BS)).toFixed(1)}× G1`);
      const agentic = await runConfigs(agenticConfigs, async () => new MockerEngine({ numBlocks: aBlocks, blockSize: BS, speedupRatio: speedup, perfModel: perf }), () => simulatedTierTarget(blockBytes, speedup, perf), aw, speedup);
      report.mockerAgentic = { g3DiskMinReuse: G3_MIN_REUSE, workload: aw, g1Tokens: aBlocks * BS, workingSetTokens: aws, kvBytesPerToken, speedupRatio: speedup, results: agentic };
      console.log(table('mocker agentic (8k-token first turn, 256-token turns; simulated ms)', agentic));
    }

    // ---- native CPU engine: tiny model, real copies, a real disk tier ----
    if (!skipNative) {
      const { createNativeEngine } = await import('../workers/engines/native/index.js');
      const modelDir = join(tmp, 'tiny');
      await makeTinyModel({ arch: 'qwen2', outDir: modelDir, dtype: 'f32', seed: 7 });
      const nBlocks = 64; // G1 = 1024 tokens
      const nw: Workload = { sessions: quick ? 8 : 12, turns: 5, userTokens: 96, outputTokens: 16, thinkMs: 1500, vocab: 200, blockSize: BS };
      const nws = nw.sessions * nw.turns * (nw.userTokens + nw.outputTokens);
      const probe = await createNativeEngine({ modelDir, numBlocks: nBlocks, blockSize: BS, threads: 1 });
      const nbb = probe.model.kvBytesPerBlock;
      nw.vocab = probe.info.vocabSize;
      await probe.close();
      const diskDir = join(tmp, 'g3');
      const nativeConfigs: Configs = [
        { name: 'G1' },
        { name: 'G1+G2', tiers: { hostCacheBytes: Math.ceil((nws / BS) * 1.25) * nbb } },
        { name: 'G1+G2+G3', tiers: { hostCacheBytes: nBlocks * nbb, diskCacheDir: diskDir, diskCacheBytes: 4 * Math.ceil(nws / BS) * nbb, diskMinReuse: G3_MIN_REUSE } },
      ];
      console.error(`native: ${nw.sessions} sessions × ${nw.turns} turns, working set ${nws} tokens = ${(nws / (nBlocks * BS)).toFixed(1)}× G1`);
      const native = await runConfigs(
        nativeConfigs,
        () => createNativeEngine({ modelDir, numBlocks: nBlocks, blockSize: BS, threads: 1 }),
        (e) => hostPoolTierTarget(e as Awaited<ReturnType<typeof createNativeEngine>>, 'tiny'),
        nw,
        1,
      );
      report.native = { g3DiskMinReuse: G3_MIN_REUSE, workload: nw, g1Tokens: nBlocks * BS, workingSetTokens: nws, kvBytesPerBlock: nbb, results: native, perBlock: await perBlockCosts(createNativeEngine, modelDir, BS, join(tmp, 'probe-g3')) };
      console.log(table('native CPU engine (tiny qwen2 f32; TTFT in wall ms)', native));
      console.log('native per block:', JSON.stringify(report.native && (report.native as { perBlock: unknown }).perBlock));
    }
    const out = resolve(here, 'results', 'kv-tiers.json');
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
    console.log(`wrote ${out}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Onboard time per block (host slab → pool, disk file → pool) against recompute time per block. */
async function perBlockCosts(
  create: (o: { modelDir: string; numBlocks: number; blockSize: number; threads: number }) => Promise<Engine & { kvPool(): ArrayBuffer; kvLayoutName: string; model: { kvBytesPerBlock: number } }>,
  modelDir: string,
  bs: number,
  diskDir: string,
): Promise<Record<string, number>> {
  const n = 32;
  const engine = await create({ modelDir, numBlocks: n + 1, blockSize: bs, threads: 1 });
  const vocab = engine.info.vocabSize;
  const toks = Int32Array.from({ length: n * bs + 1 }, (_, i) => (i * 7 + 3) % vocab);
  const table = Int32Array.from({ length: n + 1 }, (_, i) => i);
  const seq = (len: number) => ({
    sequences: [{ seqId: 1, tokenIds: toks.subarray(0, len), startPos: 0, blockTable: table, sample: true, sampling: { temperature: 0 }, history: toks.subarray(0, len), numPromptTokens: len, requestSeed: 0 }],
  });
  await engine.step(seq(bs + 1)); // warm-up
  let t = performance.now();
  await engine.step(seq(n * bs + 1));
  const recomputeMs = (performance.now() - t) / n;
  const target = hostPoolTierTarget(engine, 'tiny');
  const ids = Array.from({ length: n }, (_, i) => i);
  const blocks = await target.copier.readBlocks(ids);
  t = performance.now();
  for (let r = 0; r < 10; r++) await target.copier.writeBlocks(ids, blocks);
  const hostMs = (performance.now() - t) / (10 * n);
  const { DiskBlockStore } = await import('../workers/kv-tiers/index.js');
  const store = new DiskBlockStore({ dir: diskDir, model: 'tiny', layout: target.layout, dtype: target.dtype, blockBytes: target.copier.blockBytes });
  await store.open();
  const tokens = Int32Array.from({ length: bs }, (_, i) => i);
  for (let i = 0; i < n; i++) await store.write(BigInt(i + 1), tokens, 2, blocks[i]!);
  t = performance.now();
  const read = await Promise.all(ids.map((i) => store.read(BigInt(i + 1), tokens)));
  await target.copier.writeBlocks(ids, read as Uint8Array[]);
  const diskMs = (performance.now() - t) / n;
  await engine.close();
  return { blockBytes: target.copier.blockBytes, recomputeMsPerBlock: round(recomputeMs, 4), onboardHostMsPerBlock: round(hostMs, 5), onboardDiskMsPerBlock: round(diskMs, 4) };
}

await main();
