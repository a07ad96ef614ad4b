/**
 * Issue 38: does a host-tier onboard overlap the step it feeds? One in-process mocker EngineLoop
 * (speedup 1: every step sleeps what the perf model says) with a host tier (G2), an 8B-shaped
 * block (2 MiB, 16 tokens) copied at H100 PCIe speed (25 GB/s, `SimulatedCopier`). A prompt is a
 * 64-block prefix plus 128 new tokens, one output token; TTFT of:
 *   - prefill-only: the prefix is in the pool (G1), the step prefills the 128 new tokens;
 *   - onboard, overlapped: the prefix was pushed down to G2; its 64 blocks are copied in while
 *     the step prefills the 128 new tokens (the mocker's copier, `overlapsStep`);
 *   - onboard, serial: the same with a copier that does not overlap (the step waits for the copy);
 *   - cold: the whole prompt recomputed (no tier).
 * Overlapped should read like prefill-only (the 5.4 ms copy hides under the ~18 ms step), serial
 * like prefill-only + the copy, and both well under cold. Medians of `--trials` (default 15).
 *
 *   node --import tsx bench/onboard-overlap.ts [--trials 15]
 *
 * Writes bench/results/onboard-overlap.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PolynomialPerfModel } from '../perf-model/index.js';
import type { PreprocessedRequest } from '../proto/wire.js';
import { KvTierPolicy } from '../workers/block-manager/kv-tier-policy.js';
import { EngineLoop } from '../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../workers/engines/mocker/index.js';
import { H100_TIER_BANDWIDTHS, KvTierManager, SimulatedCopier, onboardCosts, type BlockCopier } from '../workers/kv-tiers/index.js';
import { benchArgs } from './fleet/bench-args.js';
import { summarize } from './loadgen/stats.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BS = 16;
const BLOCK_BYTES = 131_072 * BS;
const PREFIX_BLOCKS = 64;
const NEW_TOKENS = 128;
const POOL_BLOCKS = 160;

/** The mocker's copier, except that the loop waits for its copy before the step. */
class SerialCopier implements BlockCopier {
  readonly virtual = true;
  readonly overlapsStep = false;
  private readonly inner: SimulatedCopier;
  constructor(readonly blockBytes: number, bytesPerSec: number) {
    this.inner = new SimulatedCopier(blockBytes, bytesPerSec);
  }
  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]> {
    return this.inner.readBlocks(blockIds);
  }
  writeBlocks(blockIds: ArrayLike<number>): Promise<void> {
    return this.inner.writeBlocks(blockIds);
  }
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => (from + i) % 30_000);

async function ttft(loop: EngineLoop, id: string, tokenIds: number[]): Promise<number> {
  const req: PreprocessedRequest = { requestId: id, model: 'm', tokenIds, sampling: { temperature: 0, seed: 1 }, stop: { maxTokens: 1, stopTokenIds: [], ignoreEos: true } };
  const start = performance.now();
  let first: number | undefined;
  for await (const d of loop.generate(req, new AbortController().signal)) if (first === undefined && d.tokenIds.length > 0) first = performance.now() - start;
  return first!;
}

function loopWith(copier: BlockCopier | undefined): { loop: EngineLoop; tiers: KvTierManager | undefined } {
  const engine = new MockerEngine({ numBlocks: POOL_BLOCKS, blockSize: BS, speedupRatio: 1 });
  if (copier === undefined) return { loop: new EngineLoop({ engine }), tiers: undefined };
  const policy = new KvTierPolicy({ hostBlocks: 4096, diskBlocks: 0 });
  const tiers = new KvTierManager({ policy, costs: onboardCosts(new PolynomialPerfModel(), BLOCK_BYTES, H100_TIER_BANDWIDTHS), copier });
  return { loop: new EngineLoop({ engine, kvTiers: tiers }), tiers };
}

/** Per trial: prefill-only (prefix in G1), then the prefix pushed to G2 by other prompts, then the onboard. */
async function tiered(copier: BlockCopier, trials: number): Promise<{ prefillOnly: number[]; onboard: number[]; onboardedBlocks: number }> {
  const { loop, tiers } = loopWith(copier);
  const prefillOnly: number[] = [];
  const onboard: number[] = [];
  for (let t = 0; t < trials; t++) {
    const prefix = range(3_000 + t * 1_777, PREFIX_BLOCKS * BS);
    await ttft(loop, `seed${t}`, [...prefix, ...range(1, NEW_TOKENS)]);
    prefillOnly.push(await ttft(loop, `g1-${t}`, [...prefix, ...range(200, NEW_TOKENS)]));
    // Other prompts fill the pool: the prefix goes down to G2.
    for (let f = 0; f < 2; f++) await ttft(loop, `fill${t}-${f}`, range(1_000 + t * 7919 + f * 3001, (POOL_BLOCKS - 10) * BS));
    onboard.push(await ttft(loop, `g2-${t}`, [...prefix, ...range(400, NEW_TOKENS)]));
  }
  const onboardedBlocks = tiers!.stats().onboardHostBlocks;
  await loop.close();
  return { prefillOnly, onboard, onboardedBlocks };
}

async function main(): Promise<void> {
  const trials = benchArgs().number('--trials', 15);
  const overlapped = await tiered(new SimulatedCopier(BLOCK_BYTES, H100_TIER_BANDWIDTHS.hostBytesPerSec), trials);
  const serial = await tiered(new SerialCopier(BLOCK_BYTES, H100_TIER_BANDWIDTHS.hostBytesPerSec), trials);
  const { loop } = loopWith(undefined);
  const cold: number[] = [];
  for (let t = 0; t < trials; t++) cold.push(await ttft(loop, `cold${t}`, range(500_000 + t * 5000, PREFIX_BLOCKS * BS + NEW_TOKENS)));
  await loop.close();
  const med = (xs: number[]) => summarize(xs).p50;
  const copyMs = ((PREFIX_BLOCKS * BLOCK_BYTES) / H100_TIER_BANDWIDTHS.hostBytesPerSec) * 1000;
  const rows = [
    { case: 'prefill-only (prefix in G1)', ttftMsP50: med(overlapped.prefillOnly) },
    { case: 'onboard from G2, overlapped', ttftMsP50: med(overlapped.onboard) },
    { case: 'prefill-only (serial run)', ttftMsP50: med(serial.prefillOnly) },
    { case: 'onboard from G2, serial', ttftMsP50: med(serial.onboard) },
    { case: 'cold (recompute all)', ttftMsP50: med(cold) },
  ];
  const ratios = {
    overlappedOverPrefillOnly: med(overlapped.onboard) / med(overlapped.prefillOnly),
    serialOverPrefillOnly: med(serial.onboard) / med(serial.prefillOnly),
    coldOverOverlapped: med(cold) / med(overlapped.onboard),
  };
  const text = ['| case | TTFT p50 ms |', '|---|---|', ...rows.map((r) => `| ${r.case} | ${r.ttftMsP50.toFixed(1)} |`)].join('\n');
  const file = resolve(ROOT, 'bench', 'results', 'onboard-overlap.json');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ bench: 'onboard-overlap', date: new Date().toISOString(), trials, prefixBlocks: PREFIX_BLOCKS, newTokens: NEW_TOKENS, blockBytes: BLOCK_BYTES, simulatedCopyMs: copyMs, onboardedBlocks: { overlapped: overlapped.onboardedBlocks, serial: serial.onboardedBlocks }, rows, ratios, raw: { overlapped, serial, cold } }, null, 2)}\n`);
  process.stdout.write(
    `${text}\n\nsimulated copy of ${PREFIX_BLOCKS} blocks: ${copyMs.toFixed(1)} ms; onboard/prefill-only: overlapped ${ratios.overlappedOverPrefillOnly.toFixed(2)}x, serial ${ratios.serialOverPrefillOnly.toFixed(2)}x; cold/overlapped ${ratios.coldOverOverlapped.toFixed(2)}x\nwrote ${file}\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`onboard-overlap: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
