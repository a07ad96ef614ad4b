/**
 * The native sampler honours the structured-output bitmask: with `allowedTokens` every sampled
 * token is inside it (greedy, and temperature with top-k/top-p), the masked greedy token is
 * the best allowed logit, and an unmasked neighbour in the same batch is unaffected.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bitmaskWords } from '../../grammar/contract.js';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { blocks, seq, tinyModel, tokens, withTempDir } from '../native/helpers.js';

function mask(vocab: number, ids: number[]): Uint32Array {
  const m = new Uint32Array(bitmaskWords(vocab));
  for (const id of ids) m[id >>> 5]! |= 1 << (id & 31);
  return m;
}

describe('native engine: allowed-token masks', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let engine: NativeEngine;
  let vocab = 0;
  let prompt: number[] = [];

  beforeAll(async () => {
    tmp = await withTempDir();
    const dir = await tinyModel(tmp.dir, 'llama', 'f32', 5);
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 64, blockSize: 16, threads: 2 });
    vocab = engine.info.vocabSize;
    prompt = tokens(9, vocab, 3);
  });
  afterAll(async () => {
    await engine?.close();
    await tmp?.cleanup();
  });

  it('greedy picks the highest allowed logit, not the global argmax', async () => {
    const free = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 1) })] });
    const logits = free.logits;
    const best = free.sampled[0]!.tokenId;
    // Allow three tokens other than the argmax; the answer must be the best of those three.
    const allowed = [(best + 7) % vocab, (best + 13) % vocab, (best + 101) % vocab];
    const expected = allowed.reduce((a, b) => (logits[b]! > logits[a]! || (logits[b] === logits[a] && b < a) ? b : a));
    const s = seq({ tokens: prompt, blockTable: blocks(1, 1) });
    s.allowedTokens = mask(vocab, allowed);
    const r = await engine.step({ sequences: [s] });
    expect(r.sampled[0]!.tokenId).toBe(expected);
  });

  it('temperature sampling with top-k/top-p draws only allowed tokens; the unmasked row beside it is unchanged', async () => {
    const allowed = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % vocab);
    const allowedSet = new Set(allowed);
    const hot = { temperature: 1.5, topK: 40, topP: 0.9 };
    const alone = await engine.step({ sequences: [seq({ seqId: 2, tokens: prompt, blockTable: blocks(2, 1), sampling: { ...hot, seed: 9 } })] });
    for (let i = 0; i < 12; i++) {
      const masked = seq({ seqId: 1, tokens: prompt, blockTable: blocks(3, 1), sampling: { ...hot, seed: 100 + i } });
      masked.allowedTokens = mask(vocab, allowed);
      const free = seq({ seqId: 2, tokens: prompt, blockTable: blocks(4, 1), sampling: { ...hot, seed: 9 } });
      const r = await engine.step({ sequences: [masked, free] });
      expect(allowedSet.has(r.sampled[0]!.tokenId)).toBe(true);
      expect(r.sampled[1]!.tokenId).toBe(alone.sampled[0]!.tokenId);
    }
  });

  it('masks filled while the forward pass runs (prepareSampling) are applied; a failing fill fails only that step', async () => {
    const allowed = [11, 12, 13];
    let calls = 0;
    const s = seq({ seqId: 7, tokens: prompt, blockTable: blocks(6, 1) });
    const free = seq({ seqId: 8, tokens: prompt, blockTable: blocks(7, 1) });
    const plain = await engine.step({ sequences: [seq({ seqId: 8, tokens: prompt, blockTable: blocks(8, 1) })] });
    const r = await engine.step({
      sequences: [s, free],
      prepareSampling: () => {
        calls++;
        s.allowedTokens = mask(vocab, allowed);
      },
    });
    expect(calls).toBe(1);
    expect(allowed).toContain(r.sampled[0]!.tokenId);
    expect(r.sampled[1]!.tokenId).toBe(plain.sampled[0]!.tokenId);

    const failing = engine.step({
      sequences: [seq({ tokens: prompt, blockTable: blocks(9, 1) })],
      prepareSampling: () => {
        throw new Error('mask fill failed');
      },
    });
    await expect(failing).rejects.toThrow(/mask fill failed/);
    // The engine was released, not left waiting: the next step runs.
    const after = await engine.step({ sequences: [seq({ tokens: prompt, blockTable: blocks(10, 1) })] });
    expect(after.sampled).toHaveLength(1);
  });

  it('a single allowed token is always chosen (the EOS-only mask of a finished grammar)', async () => {
    const only = (prompt[0]! + 3) % vocab;
    const s = seq({ tokens: prompt, blockTable: blocks(5, 1), sampling: { temperature: 1, seed: 1 } });
    s.allowedTokens = mask(vocab, [only]);
    expect((await engine.step({ sequences: [s] })).sampled[0]!.tokenId).toBe(only);
  });
});
