/**
 * The scheduler and block manager under speculative decoding, against a reference model: a
 * stamped KV pool (workers/disagg/stamped-kv.ts: every computed token leaves a stamp of
 * (token, position) in its slot, drafts included) and the mocker's position-keyed tokens as the
 * model. fast-check drives random prompts that share prefixes, block sizes, pool sizes that
 * force preemption, stop tokens, budgets and a random accept/reject pattern per draft. Checked
 * after every step:
 *   - every slot a step reads (each sequence's positions before its first new token, prefix
 *     hits included) holds the stamp of the sequence's own token: no rejected draft's KV is read;
 *   - every cached block's stamps are its registered tokens, and every block a Stored event
 *     announced is a block of accepted tokens of some sequence: no rejected token is hashed,
 *     cached or announced;
 *   - a sequence holds no block past what its tokens need (rejected drafts' blocks are freed);
 * and at the end: outputs and finish reasons equal plain decoding's, and no block is held.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SampledToken, StepResult, TokenSample } from '../../../workers/engines/engine.js';
import { mockTokenAt } from '../../../workers/engines/mocker/tokens.js';
import { Scheduler } from '../../../workers/scheduler/scheduler.js';
import type { SchedulePlan } from '../../../workers/scheduler/types.js';
import { Speculator, type StepCostModel } from '../../../workers/speculative/index.js';
import { StampedKvPool } from '../../../workers/disagg/stamped-kv.js';
import { localBlockHashes } from '../../../router/index.js';
import type { KvEventData } from '../../../proto/wire.js';
import { VOCAB, stopOpts } from '../builders.js';

const KV_BYTES = 16;
/** Drafts always pay: a flat step cost. */
const FLAT: StepCostModel = { stepMs: () => 10 };

interface Req {
  prompt: number[];
  maxTokens: number;
  seed: number;
  stop?: number;
}

interface World {
  blockSize: number;
  numBlocks: number;
  budget: number;
  maxDrafts: number;
  reqs: Req[];
  /** Per draft position: whether the drafter guessed right (hash of seed, position). */
  rightPermille: number;
}

const token = (seed: number, position: number): number => mockTokenAt(0, seed, position, VOCAB, []);

function draftRight(w: World, seed: number, position: number): boolean {
  const h = Math.imul(seed * 2654435761 + position, 0x9e3779b1) >>> 0;
  return h % 1000 < w.rightPermille;
}

/** The engine: reads checked against stamps, stamps written, rows sampled, drafts accepted and proposed. */
function step(w: World, plan: SchedulePlan, pool: StampedKvPool, history: Map<number, Int32Array>): StepResult {
  const sampled: SampledToken[] = [];
  for (const q of plan.batch.sequences) {
    const tokens = history.get(q.seqId)!;
    expect(pool.firstMismatch(q.blockTable, tokens, 0, q.startPos)).toBe(-1);
    pool.write(q.blockTable, q.tokenIds, q.startPos);
    if (!q.sample) continue;
    const k = q.numDraftTokens ?? 0;
    const first = q.startPos + q.tokenIds.length - k;
    const out: SampledToken = { seqId: q.seqId, tokenId: token(q.requestSeed, first) };
    const following: TokenSample[] = [];
    for (let j = 0; j < k; j++) {
      const kept = j === 0 ? out.tokenId : following[j - 1]!.tokenId;
      if (kept !== q.tokenIds[q.tokenIds.length - k + j]) break;
      following.push({ tokenId: token(q.requestSeed, first + j + 1) });
    }
    if (following.length > 0) out.following = following;
    const n = q.proposeDrafts ?? 0;
    if (n > 0) {
      const next = first + 1 + following.length;
      out.drafts = Int32Array.from({ length: n }, (_, i) => (draftRight(w, q.requestSeed, next + i) ? token(q.requestSeed, next + i) : (token(q.requestSeed, next + i) + 1) % VOCAB));
      out.draftScores = new Float32Array(n).fill(NaN);
    }
    sampled.push(out);
  }
  return { sampled };
}

function run(w: World, speculate: boolean) {
  const s = new Scheduler({
    numBlocks: w.numBlocks,
    blockSize: w.blockSize,
    maxNumBatchedTokens: w.budget,
    ...(speculate ? { speculative: new Speculator({ maxDraftTokens: w.maxDrafts, cost: FLAT }) } : {}),
  });
  const pool = new StampedKvPool(new ArrayBuffer(w.numBlocks * w.blockSize * KV_BYTES), w.blockSize, KV_BYTES);
  const ids = w.reqs.map((r, i) => {
    const added = s.addSequence({ requestId: `r${i}`, promptTokenIds: r.prompt, sampling: {}, stop: stopOpts(r.maxTokens, r.stop !== undefined ? { stopTokenIds: [r.stop] } : {}), requestSeed: r.seed });
    if (added.type !== 'added') throw new Error(added.message);
    return added.seqId;
  });
  const outputs = new Map<number, number[]>(ids.map((id) => [id, []]));
  const reasons = new Map<number, string>();
  const events: KvEventData[] = [];
  const accepted = new Set<string>();  // local hashes of blocks of accepted tokens, over every sequence
  const blockIndex = new Map<number, number>();  // block id -> its index in the sequences that hold it
  let steps = 0;
  while (s.hasWork && steps++ < 5000) {
    const plan = s.schedule();
    const history = new Map(plan.batch.sequences.map((q) => [q.seqId, Int32Array.from(s.getSequence(q.seqId)!.tokenView())]));
    const result = step(w, plan, pool, history);
    const outcome = s.applyStepResult(result);
    for (const o of outcome.outputs) outputs.get(o.seqId)!.push(o.tokenId, ...(o.following ?? []).map((f) => f.tokenId));
    for (const f of outcome.finished) reasons.set(f.seqId, f.reason);
    for (const q of plan.batch.sequences) {
      const seq = s.getSequence(q.seqId);
      // Rejected drafts' blocks are not held.
      if (seq !== undefined) expect(seq.numBlocks).toBeLessThanOrEqual(s.blockManager.blocksFor(seq.numTokens));
    }
    events.push(...s.blockManager.drainEvents());
    // Every cached block's KV is its registered tokens (a prefix hit reads them next); a
    // stamp carries its position, so the block's place in its sequences is looked up.
    for (const q of plan.batch.sequences) q.blockTable.forEach((id, b) => blockIndex.set(id, b));
    for (let id = 0; id < w.numBlocks; id++) {
      if (!s.blockManager.isCached(id)) continue;
      const b = blockIndex.get(id)!;
      const tokens = new Int32Array((b + 1) * w.blockSize);
      tokens.set(s.blockManager.blockTokensOf(id), b * w.blockSize);
      expect(pool.firstMismatch([id], tokens, b * w.blockSize, (b + 1) * w.blockSize, b)).toBe(-1);
    }
  }
  // Every sequence's blocks of accepted tokens (all finished: their tokens are final).
  for (let i = 0; i < ids.length; i++) {
    const out = outputs.get(ids[i]!)!;
    for (const h of localBlockHashes([...w.reqs[i]!.prompt, ...out], w.blockSize)) accepted.add(h.toString());
  }
  return { s, pool, ids, outputs, reasons, events, accepted, steps };
}

const world: fc.Arbitrary<World> = fc
  .record({
    blockSize: fc.integer({ min: 1, max: 6 }),
    numBlocks: fc.integer({ min: 12, max: 60 }),
    budget: fc.integer({ min: 8, max: 64 }),
    maxDrafts: fc.integer({ min: 1, max: 6 }),
    rightPermille: fc.integer({ min: 0, max: 1000 }),
    base: fc.array(fc.integer({ min: 0, max: VOCAB - 1 }), { minLength: 1, maxLength: 14 }),
    reqs: fc.array(
      fc.record({ shared: fc.integer({ min: 0, max: 14 }), tail: fc.array(fc.integer({ min: 0, max: VOCAB - 1 }), { minLength: 1, maxLength: 8 }), maxTokens: fc.integer({ min: 1, max: 24 }), seed: fc.integer({ min: 1, max: 50 }), stopAt: fc.option(fc.integer({ min: 0, max: 30 })) }),
      { minLength: 1, maxLength: 5 },
    ),
  })
  .map((r) => ({
    blockSize: r.blockSize,
    numBlocks: r.numBlocks,
    budget: r.budget,
    maxDrafts: r.maxDrafts,
    rightPermille: r.rightPermille,
    reqs: r.reqs.map((q) => {
      const prompt = [...r.base.slice(0, q.shared), ...q.tail];
      // A stop token that decoding will meet (the model's token at some output position).
      const stop = q.stopAt !== null ? token(q.seed, prompt.length + q.stopAt) : undefined;
      return { prompt, maxTokens: q.maxTokens, seed: q.seed, ...(stop !== undefined ? { stop } : {}) };
    }),
  }))
  // Every sequence must fit the pool alone.
  .filter((w) => w.reqs.every((q) => Math.ceil((q.prompt.length + q.maxTokens + w.maxDrafts) / w.blockSize) <= w.numBlocks));

describe('scheduler with speculative decoding (reference model: stamped KV, the mocker tokens)', () => {
  it('random accept/reject: reads see only accepted KV, only accepted blocks are cached and announced, output = plain decoding', () => {
    fc.assert(
      fc.property(world, (w) => {
        const plain = run(w, false);
        const spec = run(w, true);
        for (let i = 0; i < w.reqs.length; i++) {
          expect(spec.outputs.get(spec.ids[i]!)).toEqual(plain.outputs.get(plain.ids[i]!));
          expect(spec.reasons.get(spec.ids[i]!)).toEqual(plain.reasons.get(plain.ids[i]!));
        }
        const bm = spec.s.blockManager;
        // Stored events name only blocks of accepted tokens.
        for (const e of spec.events) {
          if (e.type !== 'stored') continue;
          for (const b of e.blocks) expect(spec.accepted.has(b.tokensHash)).toBe(true);
        }
        expect(bm.numActiveBlocks).toBe(0);
        // Accepted drafts never cost steps.
        expect(spec.steps).toBeLessThanOrEqual(plain.steps);
      }),
      { numRuns: 80, seed: 37 },
    );
  });

  it('a verify step of 1 + k tokens reserves k more slots, and the blocks of rejected drafts are freed', () => {
    const w: World = { blockSize: 2, numBlocks: 32, budget: 64, maxDrafts: 5, rightPermille: 0, reqs: [{ prompt: [1, 2, 3], maxTokens: 20, seed: 9 }] };
    const s = new Scheduler({ numBlocks: w.numBlocks, blockSize: w.blockSize, maxNumBatchedTokens: w.budget, speculative: new Speculator({ maxDraftTokens: 5, cost: FLAT }) });
    const pool = new StampedKvPool(new ArrayBuffer(w.numBlocks * w.blockSize * KV_BYTES), w.blockSize, KV_BYTES);
    s.addSequence({ requestId: 'a', promptTokenIds: [1, 2, 3], sampling: {}, stop: stopOpts(20), requestSeed: 9 });
    const apply = () => {
      const plan = s.schedule();
      const history = new Map(plan.batch.sequences.map((q) => [q.seqId, Int32Array.from(s.getSequence(q.seqId)!.tokenView())]));
      s.applyStepResult(step(w, plan, pool, history));
      return plan;
    };
    apply();  // prefill: 3 tokens + 1 sampled = 4 tokens; drafts proposed (all wrong)
    const seq = s.getSequence(1)!;
    expect(seq.draftTokens?.length).toBe(5);
    const verify = apply();
    const q = verify.batch.sequences[0]!;
    expect(q.numDraftTokens).toBe(5);
    expect(q.tokenIds.length).toBe(6);
    expect(q.blockTable.length).toBe(Math.ceil((3 + 6) / 2));  // positions 0..8 reserved
    expect(verify.numDraftTokens).toBe(5);
    // All rejected: one token came back (5 tokens now), its blocks trimmed to what 5 tokens need.
    expect(seq.numTokens).toBe(5);
    expect(seq.numBlocks).toBe(3);
    expect(s.speculator!.counters.snapshot()).toMatchObject({ drafts: 1, draftTokens: 5, acceptedTokens: 0 });
  });

  it('max_tokens bounds the drafts: with 2 tokens left a sequence verifies at most 1 draft', () => {
    const w: World = { blockSize: 4, numBlocks: 32, budget: 64, maxDrafts: 5, rightPermille: 1000, reqs: [] };
    const s = new Scheduler({ numBlocks: 32, blockSize: 4, speculative: new Speculator({ maxDraftTokens: 5, cost: FLAT }) });
    const pool = new StampedKvPool(new ArrayBuffer(32 * 4 * KV_BYTES), 4, KV_BYTES);
    s.addSequence({ requestId: 'a', promptTokenIds: [5, 6], sampling: {}, stop: stopOpts(3), requestSeed: 4 });
    const plans: SchedulePlan[] = [];
    const outputs: number[] = [];
    while (s.hasWork) {
      const plan = s.schedule();
      plans.push(plan);
      const history = new Map(plan.batch.sequences.map((q) => [q.seqId, Int32Array.from(s.getSequence(q.seqId)!.tokenView())]));
      for (const o of s.applyStepResult(step(w, plan, pool, history)).outputs) outputs.push(o.tokenId, ...(o.following ?? []).map((f) => f.tokenId));
    }
    expect(plans.map((p) => p.batch.sequences[0]!.numDraftTokens ?? 0)).toEqual([0, 1]);
    expect(outputs).toEqual([token(4, 2), token(4, 3), token(4, 4)]);
  });
});
