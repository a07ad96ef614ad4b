/**
 * BatchMarshal's speculative-decoding arrays (native/lib/binding.ts SpecMeta): per sequence the
 * drafts to verify, the drafts to propose, and the drafter's key, which is set for every
 * sequence of a speculating worker (proposeDrafts 0 included: the drafter must see every step's
 * tokens to stay in sync); none without speculation. A verify sequence's masks are k + 1 rows,
 * each padded to the model's width.
 */
import { describe, expect, it } from 'vitest';
import { BatchMarshal } from '../../../workers/engines/native/batch-marshal.js';
import type { StepSequence } from '../../../workers/engines/engine.js';
import { SPEC_META_STRIDE } from '../../../native/index.js';

function seq(seqId: number, tokens: number[], extra: Partial<StepSequence> = {}): StepSequence {
  const tokenIds = Int32Array.from(tokens);
  return { seqId, tokenIds, startPos: 10, blockTable: Int32Array.of(0, 1), sample: true, sampling: { temperature: 0 }, history: tokenIds, numPromptTokens: 5, requestSeed: 1, ...extra };
}

describe('BatchMarshal: speculative decoding', () => {
  it('specMeta: [numDrafts, proposeDrafts, draftKey] per sequence; the key whenever proposeDrafts is set, 0 included', () => {
    const m = new BatchMarshal(2).marshal({
      sequences: [seq(7, [1, 2, 3], { numDraftTokens: 2, proposeDrafts: 5 }), seq(8, [4], { proposeDrafts: 0 }), seq(9, [5])],
    });
    expect(m.specMeta).toBeDefined();
    expect(m.specMeta!.length).toBe(3 * SPEC_META_STRIDE);
    expect([...m.specMeta!]).toEqual([2, 5, 7, 0, 0, 8, 0, 0, -1]);
  });

  it('no specMeta when nothing drafts or verifies', () => {
    expect(new BatchMarshal(2).marshal({ sequences: [seq(1, [1]), seq(2, [2])] }).specMeta).toBeUndefined();
  });

  it("a verify sequence's k + 1 mask rows are copied one by one, each zero-padded to the model's width", () => {
    // The grammar's rows are 1 word wide (vocabulary under 32), the model's 2.
    const rows = Uint32Array.of(0b0011, 0b0101, 0b1001);
    const m = new BatchMarshal(2).marshal({ sequences: [seq(1, [9], { allowedTokens: Uint32Array.of(0b1) }), seq(2, [1, 2, 3], { numDraftTokens: 2, allowedTokens: rows })] });
    expect([...m.maskRows!]).toEqual([0, 1]);
    expect([...m.allowedMasks!]).toEqual([0b1, 0, 0b0011, 0, 0b0101, 0, 0b1001, 0]);
  });
});
