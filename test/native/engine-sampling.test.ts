/**
 * Sampling: seeded draws are reproducible per (seed, position) and independent of batching;
 * greedy, top-k=1, penalties and logprobs behave as documented in native/README.md.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SamplingOptions } from '../../proto/wire.js';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { blocks, seq, tinyModel, tokens, withTempDir } from './helpers.js';

describe('native engine sampling', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let engine: NativeEngine;
  let prompt: number[];
  let nextBlock = 0;
  const table = (n: number): Int32Array => {
    const t = blocks(nextBlock, n);
    nextBlock += n;
    return t;
  };

  beforeAll(async () => {
    tmp = await withTempDir();
    const dir = await tinyModel(tmp.dir, 'qwen3', 'f32', 3);
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 512, blockSize: 16, threads: 2 });
    prompt = tokens(10, engine.info.vocabSize, 4);
  });
  afterAll(async () => {
    await engine.close();
    await tmp.cleanup();
  });

  async function generate(sampling: SamplingOptions, n: number, requestSeed = 0): Promise<number[]> {
    const t = table(2);
    const out: number[] = [];
    let r = await engine.step({ sequences: [seq({ tokens: prompt, blockTable: t, sampling, requestSeed })] });
    out.push(r.sampled[0]!.tokenId);
    for (let i = 1; i < n; i++) {
      const history = [...prompt, ...out];
      r = await engine.step({
        sequences: [
          seq({ tokens: [out[i - 1]!], startPos: prompt.length + i - 1, blockTable: t, sampling, history, numPromptTokens: prompt.length, requestSeed }),
        ],
      });
      out.push(r.sampled[0]!.tokenId);
    }
    return out;
  }

  const hot: SamplingOptions = { temperature: 1.3, topK: 50, topP: 0.95, minP: 0.02, seed: 42 };

  it('the same seed reproduces the same 12 tokens; another seed does not', async () => {
    const a = await generate(hot, 12);
    const b = await generate(hot, 12);
    const c = await generate({ ...hot, seed: 7 }, 12);
    expect(a).toEqual(b);
    expect(c).not.toEqual(a);
  });

  it('without sampling.seed the request seed decides the draws', async () => {
    const { seed: _unused, ...unseeded } = hot;
    const a = await generate(unseeded, 8, 1001);
    const b = await generate(unseeded, 8, 1001);
    const c = await generate(unseeded, 8, 2002);
    expect(a).toEqual(b);
    expect(c).not.toEqual(a);
  });

  it('a seeded draw is the same alone and inside a batch with other sequences', async () => {
    const alone = await engine.step({ sequences: [seq({ tokens: prompt, blockTable: table(2), sampling: hot })] });
    const batched = await engine.step({
      sequences: [
        seq({ seqId: 9, tokens: tokens(20, engine.info.vocabSize, 2), blockTable: table(2), sampling: { temperature: 1, seed: 3 } }),
        seq({ seqId: 1, tokens: prompt, blockTable: table(2), sampling: hot }),
      ],
    });
    expect(batched.sampled[1]!.tokenId).toBe(alone.sampled[0]!.tokenId);
  });

  it('top-k 1 at high temperature equals greedy', async () => {
    expect(await generate({ temperature: 5, topK: 1, seed: 1 }, 6)).toEqual(await generate({ temperature: 0 }, 6));
  });

  it('logprobs: the sampled token and n alternatives, sorted, summing to at most 1', async () => {
    const r = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: table(2), logprobs: 5 })] });
    const s = r.sampled[0]!;
    expect(s.topLogprobs).toHaveLength(5);
    const lps = s.topLogprobs!.map((t) => t.logprob);
    expect([...lps].sort((a, b) => b - a)).toEqual(lps);
    expect(lps.reduce((acc, lp) => acc + Math.exp(lp), 0)).toBeLessThanOrEqual(1 + 1e-5);
    // Greedy: the sampled token is the top alternative, with the same logprob.
    expect(s.topLogprobs![0]!.tokenId).toBe(s.tokenId);
    expect(s.logprob).toBeCloseTo(lps[0]!, 6);
    // Worked check against the raw logits: logprob = logit - logsumexp(logits).
    const logits = Array.from(r.logits);
    const max = Math.max(...logits);
    const lse = max + Math.log(logits.reduce((acc, l) => acc + Math.exp(l - max), 0));
    expect(s.logprob).toBeCloseTo(logits[s.tokenId]! - lse, 4);
  });

  it('logprobs 0 returns only the sampled logprob; undefined returns none', async () => {
    const r = await engine.step({
      sequences: [seq({ seqId: 1, tokens: prompt, blockTable: table(2), logprobs: 0 }), seq({ seqId: 2, tokens: prompt, blockTable: table(2) })],
    });
    expect(r.sampled[0]!.logprob).toBeLessThanOrEqual(0);
    expect(r.sampled[0]!.topLogprobs).toBeUndefined();
    expect(r.sampled[1]!.logprob).toBeUndefined();
  });

  it('logit bias: +100 forces a token under greedy, -100 bans the arg max, other sequences in the batch are untouched', async () => {
    const plain = await generate({ temperature: 0 }, 4);
    const forced = (plain[0]! + 7) % engine.info.vocabSize;
    expect(await generate({ temperature: 0, logitBias: [[forced, 100]] }, 4)).toEqual([forced, forced, forced, forced]);
    const banned = await generate({ temperature: 0, logitBias: [[plain[0]!, -100]] }, 1);
    expect(banned[0]).not.toBe(plain[0]);
    // Bias entries are per sequence: in one batch, only the biased sequence moves.
    const r = await engine.step({
      sequences: [
        seq({ seqId: 1, tokens: prompt, blockTable: table(2), sampling: { temperature: 0, logitBias: [[forced, 100]] } }),
        seq({ seqId: 2, tokens: prompt, blockTable: table(2), sampling: { temperature: 0 } }),
      ],
    });
    expect(r.sampled.map((t) => t.tokenId)).toEqual([forced, plain[0]]);
  });

  it('penalties: a large frequency penalty stops greedy from repeating a generated token', async () => {
    const plain = await generate({ temperature: 0 }, 16);
    expect(new Set(plain).size).toBeLessThan(plain.length); // the tiny model loops
    const penalized = await generate({ temperature: 0, frequencyPenalty: 100 }, 16);
    expect(new Set(penalized).size).toBe(penalized.length);
    const repetition = await generate({ temperature: 0, repetitionPenalty: 1e6 }, 8);
    expect(repetition.some((t) => prompt.includes(t))).toBe(false);
    expect(new Set(repetition).size).toBe(repetition.length);
  });
});
