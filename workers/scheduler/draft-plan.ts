/**
 * Speculative decoding's share of a step (pure, the scheduler's): how many drafts each running
 * decode verifies (the speculator's policy, capped by the drafts it has, max_tokens and the
 * model length), whether those drafts' KV fits without costing anyone a block, and how many
 * drafts to ask the engine for after the step.
 */
import type { BlockManager } from '../block-manager/block-manager.js';
import type { Sequence } from '../sequence.js';
import type { Speculator } from '../speculative/speculator.js';

export interface DraftPlan {
  /** Drafts to verify per decoding sequence (absent: none). */
  lengths: Map<Sequence, number>;
  numDecodes: number;
  /** Prompt tokens that want this step's budget first (drafts take only what is left). */
  prefillTokens: number;
  /** Drafts the engine should propose after this step (0: none). */
  propose: number;
}

/**
 * The policy's draft lengths for the running decodes (caps: their drafts, max_tokens, the
 * model length), and how many drafts to ask the engine for after this step.
 */
export function planDrafts(
  spec: Speculator,
  running: readonly Sequence[],
  waiting: readonly Sequence[],
  bm: BlockManager,
  maxModelLen: number,
  budget: number,
): DraftPlan {
  const decodes: Sequence[] = [];
  let prefill = 0;
  for (const seq of running) {
    if (seq.numUncomputedTokens === 1 && !seq.isPrefilling) decodes.push(seq);
    else prefill += seq.numUncomputedTokens;
  }
  for (const seq of waiting) prefill += seq.numUncomputedTokens;
  prefill = Math.min(prefill, Math.max(0, budget - decodes.length));
  const caps = new Int32Array(decodes.length);
  for (let i = 0; i < decodes.length; i++) caps[i] = draftCap(decodes[i]!, maxModelLen);
  const kv = bm.usage;
  const lengths = new Map<Sequence, number>();
  const planned = spec.plan(decodes, caps, prefill, kv);
  for (let i = 0; i < decodes.length; i++) if (planned[i]! > 0) lengths.set(decodes[i]!, planned[i]!);
  const propose = spec.wantDrafts(decodes.length, prefill, kv) ? spec.maxDraftTokens : 0;
  return { lengths, numDecodes: decodes.length, prefillTokens: prefill, propose };
}

/**
 * Whether `k` drafts of a decoding sequence fit without costing anyone else a block: they
 * never make room by preemption, and they take new blocks only while no sequence waits and a
 * free block stays for each running sequence (a decode later in this step may need one).
 */
export function draftBlocksFit(bm: BlockManager, seq: Sequence, k: number, numWaiting: number, numRunning: number): boolean {
  const extra = bm.blocksFor(seq.numComputedTokens + 1 + k) - Math.max(seq.numBlocks, bm.blocksFor(seq.numComputedTokens + 1));
  if (extra <= 0) return bm.canAppend(seq, 1 + k);
  return numWaiting === 0 && bm.numFreeBlocks - extra - Math.max(0, bm.blocksFor(seq.numComputedTokens + 1) - seq.numBlocks) >= numRunning;
}

/** Drafts a decoding sequence may verify: no more than it has, and none past max_tokens or the model length. */
function draftCap(seq: Sequence, maxModelLen: number): number {
  const drafts = seq.draftTokens?.length ?? 0;
  const left = Math.min(seq.stop.maxTokens - seq.numNewOutputTokens, maxModelLen - seq.numTokens) - 1;
  return Math.max(0, Math.min(drafts, left));
}
