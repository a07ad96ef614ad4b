/**
 * The draft policy, its acceptance estimates and its step costs (workers/speculative/), each
 * with the worked example of its file's header: the arithmetic is in the test names.
 */
import { describe, expect, it } from 'vitest';
import { AcceptanceModel, MeasuredStepCost, PerfModelStepCost, Speculator, draftsCanPay, planDrafts, type DraftOffer, type DraftingSequence } from '../../../workers/speculative/index.js';
import { PolynomialPerfModel } from '../../../perf-model/index.js';

/** T(t) = 10 + 0.5 (t - 1) ms. */
const linear = (t: number): number => 10 + 0.5 * (t - 1);
const offer = (k: number, p: number): DraftOffer => ({ numDrafts: k, accept: new Float64Array(k).fill(p) });

describe('planDrafts', () => {
  it('batch 1, p 0.8, T = 10 + 0.5(t-1): four drafts give 3.3616 tokens / 12 ms = 0.280 per ms > 0.1 plain -> k = 4', () => {
    const plan = planDrafts({ offers: [offer(4, 0.8)], baseTokens: 1, numDecodes: 1, stepMs: linear, margin: 0.05 });
    expect([...plan.lengths]).toEqual([4]);
    expect(plan.expectedTokens).toBeCloseTo(3.3616, 6);
    expect(plan.expectedMs).toBe(12);
    expect(plan.plainTokens / plan.plainMs).toBeCloseTo(0.1, 9);
  });

  it('batch 64, same cost: one draft each is 115.2 / 73.5 = 1.567 vs 1.542 plain (+1.6%); without a margin k = 1 for all', () => {
    const offers = Array.from({ length: 64 }, () => offer(4, 0.8));
    const plan = planDrafts({ offers, baseTokens: 64, numDecodes: 64, stepMs: linear, margin: 0 });
    expect([...plan.lengths].every((k) => k === 1)).toBe(true);
    expect(plan.expectedTokens).toBeCloseTo(115.2, 6);
    expect(plan.expectedMs).toBe(73.5);
  });

  it('batch 64 with a 5% margin: +1.6% does not clear it -> speculation off', () => {
    const offers = Array.from({ length: 64 }, () => offer(4, 0.8));
    const plan = planDrafts({ offers, baseTokens: 64, numDecodes: 64, stepMs: linear, margin: 0.05 });
    expect([...plan.lengths].every((k) => k === 0)).toBe(true);
    expect(plan.expectedTokens).toBe(64);
  });

  it('low acceptance at batch 1: p 0.04 gains 0.04 per 0.5 ms, below 0.1 per ms -> off', () => {
    const plan = planDrafts({ offers: [offer(4, 0.04)], baseTokens: 1, numDecodes: 1, stepMs: linear, margin: 0.05 });
    expect([...plan.lengths]).toEqual([0]);
  });

  it('per sequence: a likely draft is verified, an unlikely one beside it is not (p 0.9 and 0.01 at batch 2)', () => {
    const plan = planDrafts({ offers: [offer(3, 0.9), offer(3, 0.01)], baseTokens: 2, numDecodes: 2, stepMs: linear, margin: 0.05 });
    expect(plan.lengths[0]).toBe(3);
    expect(plan.lengths[1]).toBe(0);
  });

  it('free drafts (flat cost) are all taken, even at modest acceptance (p 0.3)', () => {
    const plan = planDrafts({ offers: [offer(5, 0.3)], baseTokens: 1, numDecodes: 1, stepMs: () => 10, margin: 0.05 });
    expect(plan.lengths[0]).toBe(5);
  });

  it('draftsCanPay: at batch 1 perfect drafts pay; where every token costs the same (T = t) nothing can', () => {
    expect(draftsCanPay(1, 1, 4, linear, 0.05)).toBe(true);
    expect(draftsCanPay(64, 64, 4, (t) => t, 0.05)).toBe(false);
  });
});

describe('Speculator probes', () => {
  // Every token costs the same (T = t): no draft can pay, so every sequence is kept off and
  // only probes verify.
  const kept = (): DraftingSequence => ({ draftTokens: Int32Array.of(1, 2, 3, 4), draftScores: undefined, numDraftTokensJudged: 0, numDraftTokensAccepted: 0, draftExpected: 0, numStepsSinceVerify: 0 });
  const run = (n: number, steps: number) => {
    const spec = new Speculator({ maxDraftTokens: 4, cost: { stepMs: (t: number) => t } });
    const seqs = Array.from({ length: n }, kept);
    const caps = new Int32Array(n).fill(4);
    const probeSteps: number[] = [];
    for (let step = 0; step < steps; step++) {
      const lengths = spec.plan(seqs, caps, 0, 0.1);
      if (lengths.some((k) => k > 0)) probeSteps.push(step);
      seqs.forEach((q, i) => spec.record(q, lengths[i]!, 0));
    }
    return probeSteps;
  };

  it('batch 64: the worker probes in one step of 16 (steps 15, 31, 47, 63 of 64), not in every step once all are due', () => {
    expect(run(64, 64)).toEqual([15, 31, 47, 63]);
  });

  it('batch 1: the one sequence verifies one draft every 16 steps', () => {
    expect(run(1, 64)).toEqual([15, 31, 47, 63]);
  });

  it('where no draft can pay, the drafter is still asked before each probe step, so speculation never turns off for good', () => {
    const spec = new Speculator({ maxDraftTokens: 4, cost: { stepMs: (t: number) => t } });
    const seqs = [kept()];
    const asked: number[] = [];
    for (let step = 0; step < 40; step++) {
      const lengths = spec.plan(seqs, Int32Array.of(4), 0, 0.1);
      if (spec.wantDrafts(1, 0, 0.1)) asked.push(step);
      spec.record(seqs[0]!, lengths[0]!, 0);
    }
    // Asked in the step before each probe (15, 31): the proposals reach the probe step's plan.
    expect(asked).toEqual([14, 30]);
  });
});

describe('AcceptanceModel', () => {
  it('worked example: base 0.6, 3 accepted of 8 judged at 0.6 each (expected 4.8), w 2 -> p = 0.6 x 5 / 6.8 = 0.441', () => {
    const m = new AcceptanceModel({ sequenceWeight: 2, priorRate: 0.6, priorWeight: 4, decay: 1 });
    const out = new Float64Array(1);
    m.estimate({ numDraftTokensJudged: 8, numDraftTokensAccepted: 3, draftExpected: 4.8 }, undefined, 1, out);
    expect(out[0]).toBeCloseTo((0.6 * 5) / 6.8, 9);
  });

  it('the worker-wide rate starts at the prior and follows what is judged: 2 + 10 accepted of 4 + 20 -> 0.5 (prior 0.5, weight 4)', () => {
    const m = new AcceptanceModel({ sequenceWeight: 2, priorRate: 0.5, priorWeight: 4, decay: 1 });
    expect(m.rate).toBe(0.5);
    m.record(undefined, 20, 10);  // judged 20 in a row, the first 10 accepted
    expect(m.rate).toBeCloseTo(12 / 24, 9);
  });

  it('drafter scores are calibrated: scored 0.9 but accepted half the time -> base shrinks toward 0.5', () => {
    const m = new AcceptanceModel({ sequenceWeight: 2, priorRate: 0.5, priorWeight: 4, decay: 1 });
    for (let i = 0; i < 50; i++) m.record([0.9, 0.9], 2, 1);
    expect(m.base(0.9)).toBeLessThan(0.6);
    expect(m.base(0.9)).toBeGreaterThan(0.45);
  });
});

describe('step costs', () => {
  const thrice = (c: MeasuredStepCost, tokens: number, ms: number) => [0, 1, 2].forEach(() => c.observe(tokens, ms));

  it('MeasuredStepCost: 10 ms at 1 token and 11 at 2 -> 3 tokens cost 12 (the slope of the last two)', () => {
    const c = new MeasuredStepCost();
    thrice(c, 1, 10);
    thrice(c, 2, 11);
    expect(c.stepMs(3)).toBeCloseTo(12, 9);
    expect(c.has(2)).toBe(true);
    expect(c.has(3)).toBe(false);
  });

  it('MeasuredStepCost: only 10 ms at 1 token -> 3 tokens assumed 30 ms (proportional, pessimistic)', () => {
    const c = new MeasuredStepCost();
    thrice(c, 1, 10);
    expect(c.stepMs(3)).toBeCloseTo(30, 9);
  });

  it('MeasuredStepCost: a bucket counts from its third measurement, and is the median of its last ones (a slow outlier moves nothing)', () => {
    const c = new MeasuredStepCost();
    thrice(c, 1, 10);
    c.observe(5, 14);
    c.observe(5, 14);
    expect(c.has(5)).toBe(false);
    expect(c.stepMs(5)).toBeCloseTo(50, 9);  // still unmeasured: proportional
    c.observe(5, 400);  // a stall
    expect(c.stepMs(5)).toBe(14);
    expect(c.stepMs(3)).toBeCloseTo(12, 9);  // interpolated between 1 and 5
  });

  it('MeasuredStepCost: more tokens never look cheaper (noise: 10 ms at 1, 9 at 2 -> 2 tokens: 10 ms)', () => {
    const c = new MeasuredStepCost();
    thrice(c, 1, 10);
    thrice(c, 2, 9);
    expect(c.stepMs(2)).toBe(10);
    expect(c.stepMs(4)).toBeGreaterThanOrEqual(10);
  });

  it('PerfModelStepCost (polynomial): 1 decode + 4 drafts = 5.74 + 0.0607 ms; 64 decodes + 256 drafts = 5.74 + 3.9146 ms', () => {
    const c = new PerfModelStepCost(new PolynomialPerfModel());
    c.shape(1, 0, 0);
    expect(c.stepMs(5) - c.stepMs(1)).toBeCloseTo(0.0607405, 5);
    c.shape(64, 0, 0);
    expect(c.stepMs(64 + 256) - c.stepMs(64)).toBeCloseTo(3.914551, 5);
  });
});
