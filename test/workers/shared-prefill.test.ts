/**
 * Prefix-aware admission: a waiting sequence whose next uncached prefix blocks a running
 * sequence is computing waits for them instead of computing them again (shared-prefill.ts).
 * Block size 16 throughout, so a 4-block shared prefix is 64 tokens.
 */
import { describe, expect, it } from 'vitest';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import { MAX_DEFERRED_PER_STEP } from '../../workers/scheduler/shared-prefill.js';
import type { SchedulerConfig, StepOutcome } from '../../workers/scheduler/types.js';
import type { KvEventData, TokenDelta } from '../../proto/wire.js';
import { addSeq, drive, mockResult, range, request } from './builders.js';

const BS = 16;
const PREFIX = range(1, 64); // 4 full blocks

function sched(extra: Partial<SchedulerConfig> = {}): Scheduler {
  return new Scheduler({ numBlocks: 256, blockSize: BS, ...extra });
}

/** [seqId, startPos, numTokens] of each sequence in a plan. */
function shape(plan: Plan): number[][] {
  return plan.batch.sequences.map((q) => [q.seqId, q.startPos, q.tokenIds.length]);
}

type Plan = ReturnType<Scheduler['schedule']>;

/** Steps a scheduler with the mocker's tokens and keeps every output and finish. */
class Recorder {
  readonly outputs = new Map<number, number[]>();
  readonly finished = new Map<number, StepOutcome['finished'][number]>();
  readonly plans: Plan[] = [];
  constructor(readonly s: Scheduler) {}

  step(): Plan {
    return this.apply(this.s.schedule());
  }
  apply(plan: Plan): Plan {
    this.plans.push(plan);
    const out = this.s.applyStepResult(mockResult(plan));
    for (const o of out.outputs) this.outputs.set(o.seqId, [...(this.outputs.get(o.seqId) ?? []), o.tokenId]);
    for (const f of out.finished) this.finished.set(f.seqId, f);
    return plan;
  }
  drain(maxSteps = 10_000): this {
    for (let i = 0; i < maxSteps && this.s.hasWork; i++) this.step();
    expect(this.s.hasWork).toBe(false);
    return this;
  }
}

function step(s: Scheduler): Plan {
  const plan = s.schedule();
  s.applyStepResult(mockResult(plan));
  return plan;
}

/** Seeded LCG so the workload is the same on every run. */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 4294967296);
}

/** Groups of prompts sharing a prefix, added in bursts between drives. */
function groupedWorkload(r: Recorder, seed: number): { ids: number[]; promptTokens: number } {
  const s = r.s;
  const rand = rng(seed);
  const ids: number[] = [];
  let promptTokens = 0;
  for (let burst = 0; burst < 3; burst++) {
    for (let g = 0; g < 4; g++) {
      const prefix = range(10_000 * (g + 1), 32 + g * 24);
      for (let k = 0; k < 3; k++) {
        const prompt = [...prefix, ...range(50_000 + ids.length * 100, 1 + Math.floor(rand() * 30))];
        promptTokens += prompt.length;
        ids.push(addSeq(s, prompt, 1 + Math.floor(rand() * 10), ids.length + 1));
      }
    }
    for (let i = 0; i < 3; i++) r.step();
  }
  return { ids, promptTokens };
}

function applyEvents(set: Set<string>, events: readonly KvEventData[]): Set<string> {
  for (const e of events) {
    if (e.type === 'stored') for (const b of e.blocks) set.add(b.blockHash);
    else if (e.type === 'removed') for (const h of e.blockHashes) set.delete(h);
    else set.clear();
  }
  return set;
}

describe('shared prefill deferral', () => {
  it('two waiting requests sharing a 4-block prefix: the second waits one step, then hits all 64 tokens', () => {
    const s = sched();
    const a = addSeq(s, [...PREFIX, ...range(500, 10)], 2, 1);
    const b = addSeq(s, [...PREFIX, ...range(700, 10)], 2, 2);
    const first = step(s);
    expect(shape(first)).toEqual([[a, 0, 74]]);
    expect(first.deferredSeqIds).toEqual([b]);
    expect(s.getSequence(b)).toMatchObject({ status: 'waiting', numBlocks: 0, numDeferredSteps: 1 });
    const second = s.schedule();
    expect(shape(second)).toEqual([
      [a, 74, 1],
      [b, 64, 10],
    ]);
    expect(second.deferredSeqIds).toEqual([]);
    // b shares a's four prefix blocks instead of holding copies.
    expect(Array.from(second.batch.sequences[1]!.blockTable.subarray(0, 4))).toEqual(Array.from(second.batch.sequences[0]!.blockTable.subarray(0, 4)));
    s.applyStepResult(mockResult(second));
    const log = drive(s);
    expect(log.finished.get(b)!.usage).toEqual({ promptTokens: 74, completionTokens: 2, cachedTokens: 64 });
    expect(s.numDeferrals).toBe(1);
  });

  it('with the flag off both are prefilled side by side and the second one hits nothing', () => {
    const s = sched({ deferSharedPrefill: false });
    const a = addSeq(s, [...PREFIX, ...range(500, 10)], 2, 1);
    const b = addSeq(s, [...PREFIX, ...range(700, 10)], 2, 2);
    const first = s.schedule();
    expect(shape(first)).toEqual([
      [a, 0, 74],
      [b, 0, 74],
    ]);
    expect(first.deferredSeqIds).toEqual([]);
    s.applyStepResult(mockResult(first));
    expect(drive(s).finished.get(b)!.usage.cachedTokens).toBe(0);
  });

  it('FCFS is kept for sequences that share nothing; the deferred one goes first once ready', () => {
    const s = sched({ maxNumBatchedTokens: 4096 });
    const a = addSeq(s, [...PREFIX, 900], 3, 1);
    const b = addSeq(s, [...PREFIX, 901], 3, 2);
    const c = addSeq(s, range(2000, 20), 3, 3);
    const d = addSeq(s, range(3000, 20), 3, 4);
    const first = step(s);
    expect(shape(first).map((r) => r[0])).toEqual([a, c, d]);
    expect(first.deferredSeqIds).toEqual([b]);
    const e = addSeq(s, range(4000, 20), 3, 5);
    const second = step(s);
    // Decodes first, then b (ahead of e in the queue), then e.
    expect(shape(second)).toEqual([
      [a, 65, 1],
      [c, 20, 1],
      [d, 20, 1],
      [b, 64, 1],
      [e, 0, 20],
    ]);
    expect(s.numWaiting).toBe(0);

    // A workload with no shared blocks plans exactly as without the feature.
    const plans = (defer: boolean): number[][][] => {
      const t = sched({ deferSharedPrefill: defer, maxNumBatchedTokens: 64, maxNumSeqs: 3 });
      for (let i = 0; i < 8; i++) addSeq(t, range(1000 * (i + 1), 20 + i * 7), 4, i + 1);
      return drive(t).plans.map(shape);
    };
    expect(plans(true)).toEqual(plans(false));
  });

  it('a deferred sequence does not take a running slot (maxNumSeqs)', () => {
    const s = sched({ maxNumSeqs: 2 });
    const a = addSeq(s, [...PREFIX, 900], 3, 1);
    const b = addSeq(s, [...PREFIX, 901], 3, 2);
    const c = addSeq(s, range(2000, 20), 3, 3);
    const first = step(s);
    expect(shape(first).map((r) => r[0])).toEqual([a, c]);
    expect(first.deferredSeqIds).toEqual([b]);
    expect(s.load()).toMatchObject({ numRunning: 2, numWaiting: 1 });
  });

  it('chunked prefill of the leader: the follower waits exactly for the blocks it needs', () => {
    // Budget 48: the leader's 80-token prompt takes two steps (48 + 32 tokens).
    const s = sched({ maxNumBatchedTokens: 48 });
    const r = new Recorder(s);
    const a = addSeq(s, [...PREFIX, ...range(500, 16)], 2, 1);
    const w = addSeq(s, [...PREFIX, ...range(700, 8)], 2, 2); // needs all 4 shared blocks
    const v = addSeq(s, [...PREFIX.slice(0, 32), ...range(800, 4)], 2, 3); // needs blocks 0-1 only
    const first = r.step();
    expect(shape(first)).toEqual([[a, 0, 48]]); // budget spent: nobody else considered
    expect(s.blockManager.numCachedBlocks).toBe(3);
    const second = r.step();
    // w's blocks 0-2 are cached but block 3 is in a's second chunk: w waits. v's blocks are
    // computed already, so v is admitted behind it with a 32-token hit.
    expect(second.deferredSeqIds).toEqual([w]);
    expect(shape(second)).toEqual([
      [a, 48, 32],
      [v, 32, 4],
    ]);
    const third = s.schedule();
    expect(shape(third)).toEqual([
      [a, 80, 1],
      [v, 36, 1],
      [w, 64, 8],
    ]);
    r.apply(third);
    r.drain();
    expect(r.finished.get(w)!.usage.cachedTokens).toBe(64);
    expect(r.finished.get(v)!.usage.cachedTokens).toBe(32);
    expect(s.blockManager.numActiveBlocks).toBe(0);
  });

  it('one step walks past at most MAX_DEFERRED_PER_STEP deferred sequences; the rest wait in order', () => {
    const s = sched({ numBlocks: 1024, maxNumSeqs: 1024 });
    const a = addSeq(s, [...PREFIX, 900], 1, 1);
    const followers = range(0, MAX_DEFERRED_PER_STEP + 1).map((i) => addSeq(s, [...PREFIX, 1000 + i, 5000 + i], 1, i + 2));
    const c = addSeq(s, range(9000, 10), 1, 9999);
    const first = step(s);
    expect(shape(first).map((r) => r[0])).toEqual([a]);
    expect(first.deferredSeqIds).toEqual(followers.slice(0, MAX_DEFERRED_PER_STEP));
    expect(s.numWaiting).toBe(MAX_DEFERRED_PER_STEP + 2);
    const second = step(s);
    expect(shape(second).map((r) => r[0])).toEqual([...followers, c]);
    expect(second.batch.sequences.slice(0, -1).every((q) => q.startPos === 64)).toBe(true);
  });

  it('the leader aborted: the deferred one is admitted next step and computes the prefix itself', () => {
    const s = sched();
    const a = addSeq(s, [...PREFIX, ...range(500, 10)], 2, 1);
    const b = addSeq(s, [...PREFIX, ...range(700, 10)], 2, 2);
    const first = s.schedule();
    expect(first.deferredSeqIds).toEqual([b]);
    expect(s.abort(a)).toBe(true); // in flight: its result is dropped, nothing is cached
    s.applyStepResult(mockResult(first));
    expect(s.blockManager.numCachedBlocks).toBe(0);
    const second = step(s);
    expect(shape(second)).toEqual([[b, 0, 74]]);
    expect(second.deferredSeqIds).toEqual([]);
    expect(drive(s).finished.get(b)!.usage.cachedTokens).toBe(0);
  });

  it('the leader preempted: it leads nothing while it waits, and everything ends as without deferral', () => {
    // 7 blocks. Step 1: o decodes (2 blocks), l prefills its 80 tokens (5 blocks), f waits for
    // them. Step 2: o needs a 3rd block, so the newest running sequence, l, is preempted.
    const run = (defer: boolean) => {
      const s = new Scheduler({ numBlocks: 7, blockSize: BS, maxNumBatchedTokens: 256, deferSharedPrefill: defer });
      const r = new Recorder(s);
      const o = addSeq(s, range(3000, 31), 17, 1);
      r.step();
      const l = addSeq(s, [...PREFIX, ...range(500, 16)], 3, 2);
      const f = addSeq(s, [...PREFIX, ...range(700, 8)], 3, 3);
      const lWaiting: boolean[] = [];
      for (let i = 0; i < 1000 && s.hasWork; i++) {
        r.step();
        lWaiting.push(s.getSequence(l)?.status === 'waiting');
      }
      return { s, r, o, l, f, lWaiting };
    };
    const on = run(true);
    const plans = on.r.plans.slice(1);
    expect(plans[0]!.deferredSeqIds).toEqual([on.f]);
    const preemptAt = plans.findIndex((p) => p.preemptedSeqIds.includes(on.l));
    expect(preemptAt).toBe(1);
    expect(on.lWaiting[preemptAt]).toBe(true);
    // f is deferred only in steps that end with l running: a waiting leader leads nothing.
    plans.forEach((p, i) => {
      if (p.deferredSeqIds.includes(on.f)) expect(on.lWaiting[i]).toBe(false);
    });
    expect(on.s.hasWork).toBe(false);
    expect(on.s.blockManager.numActiveBlocks).toBe(0);
    const off = run(false);
    expect(off.s.numPreemptions).toBeGreaterThan(0);
    for (const id of [on.o, on.l, on.f]) expect(on.r.outputs.get(id)).toEqual(off.r.outputs.get(id));
    expect(on.r.finished.get(on.f)!.usage.cachedTokens).toBe(64);
  });

  it('a chain of leaders: the follower waits for each, and maxDeferSteps bounds it', () => {
    // l1 shares blocks 0-1 with f, l2 shares blocks 0-3: f waits for l1, then for l2.
    const run = (maxDeferSteps?: number) => {
      const s = sched(maxDeferSteps === undefined ? {} : { maxDeferSteps });
      const r = new Recorder(s);
      addSeq(s, [...PREFIX.slice(0, 32), ...range(500, 20)], 2, 1);
      const l2 = addSeq(s, [...PREFIX, ...range(600, 10)], 2, 2);
      const f = addSeq(s, [...PREFIX, ...range(700, 8)], 2, 3);
      r.drain();
      return { r, l2, f, deferred: r.plans.map((p) => p.deferredSeqIds) };
    };
    const free = run();
    expect(free.deferred.slice(0, 3)).toEqual([[free.l2, free.f], [free.f], []]);
    expect(free.r.finished.get(free.l2)!.usage.cachedTokens).toBe(32);
    expect(free.r.finished.get(free.f)!.usage.cachedTokens).toBe(64);
    const bounded = run(1);
    expect(bounded.deferred.slice(0, 2)).toEqual([[bounded.l2, bounded.f], []]);
    // Admitted next to l2: f computes blocks 2-3 itself.
    expect(bounded.r.finished.get(bounded.f)!.usage.cachedTokens).toBe(32);
    const off = run(0);
    expect(off.deferred.flat()).toEqual([]);
    expect(off.r.finished.get(off.f)!.usage.cachedTokens).toBe(0);
    expect(bounded.r.outputs.get(bounded.f)).toEqual(free.r.outputs.get(free.f));
  });

  it('outputs are identical with and without deferral, and replayed KV events reproduce the block set', () => {
    const run = (defer: boolean, numBlocks: number) => {
      const s = sched({ deferSharedPrefill: defer, numBlocks, maxNumBatchedTokens: 128, maxNumSeqs: 8 });
      const log = new Recorder(s);
      const { ids } = groupedWorkload(log, 42);
      log.drain();
      const events = s.blockManager.drainEvents();
      const cached = ids.reduce((n, id) => n + log.finished.get(id)!.usage.cachedTokens, 0);
      return { s, ids, log, events, cached };
    };
    for (const numBlocks of [256, 24]) {
      const on = run(true, numBlocks);
      const off = run(false, numBlocks);
      expect(on.s.numDeferrals).toBeGreaterThan(0);
      expect(on.ids.map((id) => on.log.finished.get(id)?.reason)).toEqual(off.ids.map((id) => off.log.finished.get(id)?.reason));
      expect(on.ids.map((id) => on.log.outputs.get(id))).toEqual(off.ids.map((id) => off.log.outputs.get(id)));
      expect(on.cached).toBeGreaterThan(off.cached);
      expect(applyEvents(new Set(), on.events)).toEqual(on.s.blockManager.cachedBlockHashes());
      expect(on.s.blockManager.numActiveBlocks).toBe(0);
    }
  });

  it('engine loop: a burst of grouped prompts gives the same tokens and more cached tokens', async () => {
    const run = async (defer: boolean) => {
      const loop = new EngineLoop({
        engine: new MockerEngine({ numBlocks: 512, blockSize: BS, vocabSize: 500, speedupRatio: 1e6 }),
        scheduler: { maxNumBatchedTokens: 1024, maxNumSeqs: 32, deferSharedPrefill: defer },
      });
      const jobs = range(0, 24).map((i) => {
        const prompt = [...range(1000 * (1 + (i % 4)), 96), ...range(100_000 + i * 50, 5 + (i % 7))];
        return collectAll(loop.generate(request(`r${i}`, prompt, 6), new AbortController().signal));
      });
      const results = await Promise.all(jobs);
      await loop.close();
      return {
        tokens: results.map((d) => d.flatMap((x) => x.tokenIds)),
        cached: results.reduce((n, d) => n + d[d.length - 1]!.usage!.cachedTokens, 0),
      };
    };
    const on = await run(true);
    const off = await run(false);
    expect(on.tokens).toEqual(off.tokens);
    // 4 groups × 6 requests, 96-token (6-block) prefixes: with deferral only each group's
    // first request misses, so 20 × 96 tokens are cached.
    expect(on.cached).toBe(20 * 96);
    expect(off.cached).toBeLessThan(on.cached);
  });
});

async function collectAll(stream: AsyncIterable<TokenDelta>): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}
