/**
 * KV tiers on the native CPU engine: a prefix evicted from the engine pool is onboarded from
 * the host tier (G2) and from the disk tier (G3). Greedy tokens equal the cold run's; logprobs
 * equal, bit for bit, those of the same prompt whose prefix is a hit in the engine pool (the
 * onboarded KV bytes are the ones computed; a prefill split 40 + 1 instead of 41 sums in another
 * order, so it differs from the cold run in the last float bits).
 */
import { readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine } from '../../workers/engines/native/index.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { createKvTiers, devicePoolTierTarget, hostPoolTierTarget, type KvTierOptions } from '../../workers/kv-tiers/index.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { Sequence } from '../../workers/sequence.js';
import { tinyModel, tokens, withTempDir } from './helpers.js';

const BLOCK_SIZE = 4;
const NUM_BLOCKS = 24;

interface Run {
  tokenIds: number[];
  logprobs: number[];
  cachedTokens: number;
}

async function generate(loop: EngineLoop, id: string, prompt: number[]): Promise<Run> {
  const req: PreprocessedRequest = { requestId: id, model: 'tiny', tokenIds: prompt, sampling: { temperature: 0 }, stop: { maxTokens: 6, stopTokenIds: [], ignoreEos: true }, logprobs: 0 };
  const out: Run = { tokenIds: [], logprobs: [], cachedTokens: -1 };
  for await (const d of loop.generate(req, new AbortController().signal) as AsyncGenerator<TokenDelta>) {
    out.tokenIds.push(...d.tokenIds);
    for (const lp of d.logprobs ?? []) out.logprobs.push(lp.logprob);
    if (d.usage) out.cachedTokens = d.usage.cachedTokens;
  }
  return out;
}

describe('KV tiers on the native CPU engine', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let modelDir: string;
  let vocab: number;
  let prompt: number[];
  let fillers: number[][];
  let cold: Run;
  let warm: Run;
  let blockBytes: number;

  async function tieredLoop(options: KvTierOptions, kvCacheDtype: 'auto' | 'fp8' = 'auto') {
    const engine = await createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1, kvCacheDtype });
    const target = hostPoolTierTarget(engine, 'tiny');
    const tiers = (await createKvTiers(options, target))!;
    return { loop: new EngineLoop({ engine, kvTiers: tiers }), tiers };
  }

  beforeAll(async () => {
    tmp = await withTempDir();
    modelDir = await tinyModel(tmp.dir, 'qwen2', 'f32', 25);
    const engine = await createNativeEngine({ modelDir, numBlocks: 256, blockSize: BLOCK_SIZE, threads: 1 });
    vocab = engine.info.vocabSize;
    blockBytes = engine.model.kvBytesPerBlock;
    prompt = tokens(41, vocab, 3); // 10 full blocks + 1 token
    // Each filler fills the pool with other blocks, so the prompt's blocks are evicted.
    fillers = [5, 6, 7].map((salt) => tokens(70, vocab, salt));
    const loop = new EngineLoop({ engine });
    cold = await generate(loop, 'cold', prompt);
    warm = await generate(loop, 'warm', prompt);
    expect(warm.cachedTokens).toBe(40);
    expect(warm.tokenIds).toEqual(cold.tokenIds);
    await loop.close();
    expect(cold.tokenIds).toHaveLength(6);
  });
  afterAll(async () => {
    await tmp?.cleanup();
  });

  it('onboards an evicted prefix from the host tier: same tokens and logprobs as cold, prefix counted as cached', async () => {
    const { loop, tiers } = await tieredLoop({ hostCacheBytes: 200 * blockBytes });
    try {
      expect(await generate(loop, 'first', prompt)).toEqual({ ...cold, cachedTokens: 0 });
      for (const [i, f] of fillers.entries()) await generate(loop, `fill-${i}`, f);
      // The prompt is gone from the engine pool...
      expect(loop.scheduler.blockManager.findPrefixHit(seqOf(prompt)).numTokens).toBe(0);
      const again = await generate(loop, 'again', prompt);
      const st = tiers.stats();
      expect(st.onboardHostBlocks).toBe(10);
      expect(st.onboardBytes).toBe(10 * blockBytes);
      expect(again.cachedTokens).toBe(40);
      expect(again.tokenIds).toEqual(cold.tokenIds);
      expect(again.logprobs).toEqual(warm.logprobs);
      again.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(cold.logprobs[i]!, 4));
    } finally {
      await loop.close();
    }
  });

  it('an e4m3 KV pool (--kv-cache-dtype fp8) keeps e4m3 blocks in the host tier: a quarter of the bytes, output equal to a pool hit', async () => {
    const { loop, tiers } = await tieredLoop({ hostCacheBytes: 200 * blockBytes }, 'fp8');
    try {
      const first = await generate(loop, 'first', prompt);
      const hit = await generate(loop, 'hit', prompt);
      expect(hit.cachedTokens).toBe(40);
      for (const [i, f] of fillers.entries()) await generate(loop, `fill-${i}`, f);
      expect(loop.scheduler.blockManager.findPrefixHit(seqOf(prompt)).numTokens).toBe(0);
      const again = await generate(loop, 'again', prompt);
      const st = tiers.stats();
      expect(st.onboardHostBlocks).toBe(10);
      expect(st.onboardBytes).toBe((10 * blockBytes) / 4); // e4m3 against the f32 pool's bytes
      expect(again.cachedTokens).toBe(40);
      expect(again.tokenIds).toEqual(hit.tokenIds);
      expect(again.logprobs).toEqual(hit.logprobs); // the onboarded e4m3 bytes are the ones computed
      expect(first.tokenIds).toHaveLength(6);
    } finally {
      await loop.close();
    }
  });

  it('onboards an evicted prefix from the disk tier after the host tier pushed it out: same output as cold', async () => {
    const dir = `${tmp.dir}/g3`;
    // A host tier smaller than the fillers: the prompt's blocks fall through to disk.
    const { loop, tiers } = await tieredLoop({ hostCacheBytes: 12 * blockBytes, diskCacheDir: dir, diskCacheBytes: 500 * blockBytes, diskMinReuse: 0 });
    try {
      await generate(loop, 'first', prompt);
      for (const [i, f] of fillers.entries()) await generate(loop, `fill-${i}`, f);
      await tiers.idle();
      expect(loop.scheduler.blockManager.findPrefixHit(seqOf(prompt)).numTokens).toBe(0);
      const again = await generate(loop, 'again', prompt);
      const st = tiers.stats();
      expect(st.onboardDiskBlocks).toBe(10);
      expect(st.onboardHostBlocks).toBe(0);
      expect(again.cachedTokens).toBe(40);
      expect(again.tokenIds).toEqual(cold.tokenIds);
      expect(again.logprobs).toEqual(warm.logprobs);
      again.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(cold.logprobs[i]!, 4));
    } finally {
      await loop.close();
    }
  });

  it('a corrupt, truncated or deleted disk tier only costs a recompute: every request is served, output unchanged', async () => {
    const dir = `${tmp.dir}/g3-faults`;
    const { loop, tiers } = await tieredLoop({ hostCacheBytes: 12 * blockBytes, diskCacheDir: dir, diskCacheBytes: 500 * blockBytes, diskMinReuse: 0 });
    try {
      await generate(loop, 'first', prompt);
      for (const [i, f] of fillers.entries()) await generate(loop, `fill-${i}`, f);
      await tiers.idle();
      // Damage every block file of the disk tier: truncate half, flip a payload byte in the rest.
      const files = (await readdir(dir)).filter((n) => n.endsWith('.kvb')).sort();
      expect(files.length).toBeGreaterThan(10);
      for (const [i, name] of files.entries()) {
        const path = join(dir, name);
        if (i % 2 === 0) await truncate(path, 40);
        else {
          const bytes = await readFile(path);
          bytes[bytes.length - 8]! ^= 0x5a;
          await writeFile(path, bytes);
        }
      }
      const again = await generate(loop, 'again', prompt);
      expect(tiers.stats().onboardFailures).toBe(1);
      expect(again.cachedTokens).toBe(0);
      expect(again.tokenIds).toEqual(cold.tokenIds);
      expect(again.logprobs).toEqual(cold.logprobs);
      // The damaged blocks are forgotten; the directory itself goes away and comes back.
      await tiers.idle();
      await rm(dir, { recursive: true, force: true });
      for (const [i, f] of fillers.entries()) await generate(loop, `refill-${i}`, f);
      const last = await generate(loop, 'last', prompt);
      expect(last.tokenIds).toEqual(cold.tokenIds);
      await tiers.idle();
      expect((await readdir(dir)).some((n) => n.endsWith('.kvb'))).toBe(true);
    } finally {
      await loop.close();
    }
  });
});

describe('KV tiers on a device pool (the CUDA backend on the SIMT harness): copies go through kvReadBlocks / kvWriteBlocks', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let modelDir: string;

  beforeAll(async () => {
    tmp = await withTempDir();
    modelDir = await tinyModel(tmp.dir, 'qwen2', 'f32', 25);
  });
  afterAll(async () => {
    await tmp?.cleanup();
  });

  it('onboards an evicted prefix from the host tier: same tokens as cold, logprobs equal a pool hit', async () => {
    const open = () => createNativeEngine({ modelDir, device: 'simt', numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1, maxBatchTokens: 256, maxSeqs: 8 });
    const reference = await open();
    const vocab = reference.info.vocabSize;
    const prompt = tokens(41, vocab, 3);
    const fillers = [5, 6, 7].map((salt) => tokens(70, vocab, salt));
    const plain = new EngineLoop({ engine: reference });
    const cold = await generate(plain, 'cold', prompt);
    const warm = await generate(plain, 'warm', prompt);
    await plain.close();
    expect(warm.cachedTokens).toBe(40);

    const engine = await open();
    expect(engine.model.kvPoolOnHost).toBe(false);
    const target = devicePoolTierTarget(engine, 'tiny');
    expect(target.dtype).toBe('bf16');
    const tiers = (await createKvTiers({ hostCacheBytes: 200 * engine.model.kvBytesPerBlock }, target))!;
    const loop = new EngineLoop({ engine, kvTiers: tiers });
    try {
      await generate(loop, 'first', prompt);
      for (const [i, f] of fillers.entries()) await generate(loop, `fill-${i}`, f);
      expect(loop.scheduler.blockManager.findPrefixHit(seqOf(prompt)).numTokens).toBe(0);
      const again = await generate(loop, 'again', prompt);
      expect(tiers.stats().onboardHostBlocks).toBe(10);
      expect(again.cachedTokens).toBe(40);
      expect(again.tokenIds).toEqual(cold.tokenIds);
      expect(again.logprobs).toEqual(warm.logprobs);
    } finally {
      await loop.close();
    }
  });
});

function seqOf(prompt: number[]): Sequence {
  return new Sequence({ seqId: 999, requestId: 'probe', promptTokenIds: prompt, sampling: {}, stop: { maxTokens: 1, stopTokenIds: [], ignoreEos: true }, requestSeed: 0 });
}
