/**
 * The pure parts of the hand-off, step by step: the scheduler admitting a sequence whose
 * leading KV is imported (remote prefill), and PinnedBlocks' release and timeout rules.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import { PinnedBlocks } from '../../workers/disagg/pinned-blocks.js';
import { StampedKvPool } from '../../workers/disagg/stamped-kv.js';

const stop = (maxTokens: number) => ({ maxTokens, stopTokenIds: [], ignoreEos: true });
const prompt = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + i);

function addRemote(s: Scheduler, tokens: number[], numRemote: number, maxTokens = 4): number {
  const r = s.addSequence({ requestId: `r${tokens.length}`, promptTokenIds: tokens, sampling: {}, stop: stop(maxTokens), requestSeed: 1, numRemoteTokens: numRemote, numPriorOutputTokens: 1 });
  if (r.type !== 'added') throw new Error(r.message);
  return r.seqId;
}

describe('scheduler: remote-prefill sequences', () => {
  it('admission allocates blocks for the imported tokens, plans no compute, and completeTransfer makes it a decode', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4, maxNumBatchedTokens: 64 });
    const id = addRemote(s, prompt(10), 9); // prompt of 9 + the first token from the prefill worker
    const plan = s.schedule();
    expect(plan.batch.sequences).toHaveLength(0);
    expect(plan.transfers).toHaveLength(1);
    expect(plan.transfers[0]!.localBlockIds).toHaveLength(3); // ceil(9 / 4)
    expect(plan.transfers[0]!.firstBlock).toBe(0);
    s.applyStepResult({ sampled: [] });
    expect(s.numTransferring).toBe(1);
    expect(s.load().numRunning).toBe(1);
    expect(s.blockManager.numActiveBlocks).toBe(3);

    expect(s.completeTransfer(id, true)).toBe('running');
    const next = s.schedule();
    expect(next.batch.sequences).toHaveLength(1);
    const step = next.batch.sequences[0]!;
    expect(step.startPos).toBe(9); // only the first token is computed here
    expect(Array.from(step.tokenIds)).toEqual([10]);
    expect(step.numPromptTokens).toBe(9); // the first token counts as output
    expect(next.numDecodeSeqs).toBe(1);
  });

  it('a failed import keeps the blocks and computes the whole prompt here', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4, maxNumBatchedTokens: 64 });
    const id = addRemote(s, prompt(10), 9);
    s.schedule();
    s.applyStepResult({ sampled: [] });
    expect(s.completeTransfer(id, false)).toBe('recompute');
    const plan = s.schedule();
    expect(plan.batch.sequences[0]!.startPos).toBe(0);
    expect(plan.batch.sequences[0]!.tokenIds).toHaveLength(10);
  });

  it('abort during the import frees the blocks only when the import settles', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4 });
    const id = addRemote(s, prompt(10), 9);
    s.schedule();
    s.applyStepResult({ sampled: [] });
    expect(s.abort(id)).toBe(true);
    expect(s.blockManager.numActiveBlocks).toBe(3); // the pull may still be writing into them
    expect(s.completeTransfer(id, true)).toBe('freed');
    expect(s.blockManager.numActiveBlocks).toBe(0);
    expect(s.numTransferring).toBe(0);
  });

  it('leading blocks already in the local prefix cache are not imported', () => {
    const s = new Scheduler({ numBlocks: 16, blockSize: 4, maxNumBatchedTokens: 64 });
    const shared = prompt(8);
    const local = s.addSequence({ requestId: 'a', promptTokenIds: [...shared, 50, 51], sampling: {}, stop: stop(1), requestSeed: 1 });
    expect(local.type).toBe('added');
    s.schedule();
    s.applyStepResult({ sampled: [{ seqId: (local as { seqId: number }).seqId, tokenId: 9 }] });
    addRemote(s, [...shared, 60, 61, 62, 63, 64], 12);
    const plan = s.schedule();
    expect(plan.transfers[0]!.firstBlock).toBe(2);
    expect(plan.transfers[0]!.localBlockIds).toHaveLength(1); // block 2 of 3
  });

  it('refuses remote KV that would leave nothing to compute', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4 });
    const r = s.addSequence({ requestId: 'x', promptTokenIds: prompt(5), sampling: {}, stop: stop(2), requestSeed: 1, numRemoteTokens: 5 });
    expect(r.type).toBe('rejected');
  });

  it('stop limits and usage count only this request’s outputs, not the prior first token', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4 });
    const id = addRemote(s, prompt(6), 5, 2);
    s.schedule();
    s.applyStepResult({ sampled: [] });
    s.completeTransfer(id, true);
    s.schedule();
    expect(s.applyStepResult({ sampled: [{ seqId: id, tokenId: 70 }] }).finished).toHaveLength(0);
    s.schedule();
    const out = s.applyStepResult({ sampled: [{ seqId: id, tokenId: 71 }] });
    expect(out.finished[0]!.reason).toBe('length');
    expect(out.finished[0]!.usage).toEqual({ promptTokens: 5, completionTokens: 2, cachedTokens: 0 });
  });
});

describe('PinnedBlocks', () => {
  afterEach(() => vi.useRealTimers());

  it('release frees once; the timeout frees what nobody released, and not before', () => {
    vi.useFakeTimers();
    const freed: number[] = [];
    const ended: string[] = [];
    const pins = new PinnedBlocks({ free: (id) => freed.push(id), releaseTimeoutMs: 1000, onEnd: (e) => ended.push(e.reason) });
    const a = pins.pin(1, 3);
    const b = pins.pin(2, 2);
    expect(a).not.toBe(b);
    expect(pins.numBlocks).toBe(5);
    expect(pins.release(a)).toBe(true);
    expect(pins.release(a)).toBe(false);
    expect(freed).toEqual([1]);
    vi.advanceTimersByTime(999);
    expect(freed).toEqual([1]);
    vi.advanceTimersByTime(1);
    expect(freed).toEqual([1, 2]);
    expect(ended).toEqual(['released', 'timeout']);
    expect(pins.numTimeouts).toBe(1);
    expect(pins.numBlocks).toBe(0);
    expect(pins.release(b)).toBe(false); // a late release after the timeout is harmless
  });
});

describe('StampedKvPool', () => {
  it('finds the first slot whose stamp does not match its token and position', () => {
    const pool = new StampedKvPool(new ArrayBuffer(4 * 4 * 32), 4, 32);
    const toks = [5, 6, 7, 8, 9, 10];
    pool.write([2, 0], toks, 0);
    expect(pool.firstMismatch([2, 0], toks, 0, 6)).toBe(-1);
    expect(pool.firstMismatch([0, 2], toks, 0, 6)).toBe(0); // blocks swapped
    expect(pool.firstMismatch([2, 0], [5, 6, 7, 8, 9, 11], 0, 6)).toBe(5); // another token
    expect(pool.firstMismatch([0], toks, 4, 6, 1)).toBe(-1); // partial table from block 1
  });
});
