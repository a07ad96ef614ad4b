/**
 * Speculator: the scheduler's speculative-decoding state (pure: no clock, no I/O). Per step it
 * caps each decoding sequence's drafts (token budget, max_tokens, model length), estimates each
 * draft's acceptance (acceptance.ts), asks the policy (draft-policy.ts) how many to verify with
 * the step cost model (step-cost.ts), and probes a sequence it turned off now and then so its
 * estimate can recover. After the step it records what was accepted: the per-sequence
 * correction, the worker-wide rates, and the vLLM-named counters.
 */
import { AcceptanceModel, ACCEPTANCE_DEFAULTS, type AcceptanceOptions } from './acceptance.js';
import { draftsCanPay, planDrafts, type DraftOffer } from './draft-policy.js';
import type { StepCostModel } from './step-cost.js';
import { SpecCounters } from './spec-counters.js';

/** What the speculator reads of a sequence (workers/sequence.ts). */
export interface DraftingSequence {
  draftTokens: Int32Array | undefined;
  draftScores: Float32Array | undefined;
  numDraftTokensJudged: number;
  numDraftTokensAccepted: number;
  draftExpected: number;
  numStepsSinceVerify: number;
}

export interface SpeculatorConfig {
  /** --num-speculative-tokens: drafts one sequence verifies at most in a step. */
  maxDraftTokens: number;
  /** Step times: measured (native) or the perf model's (mocker). */
  cost: StepCostModel & {
    shape?(numDecodes: number, prefillTokens: number, kvUsage: number): void;
    /** Measured models: whether a step of this many tokens was seen (unseen ones are explored). */
    has?(tokens: number): boolean;
    /** Measured models: a step's time, as the engine loop saw it. */
    observe?(tokens: number, ms: number): void;
  };
  /** Gain in tokens per millisecond that speculation must promise over plain decoding; default 0.05. */
  margin?: number;
  /** The worker probes (a sequence kept off verifies one draft: its estimate may recover) in one step of this many; default 16. */
  probeInterval?: number;
  acceptance?: AcceptanceOptions;
}

export class Speculator {
  readonly maxDraftTokens: number;
  readonly counters: SpecCounters;
  readonly acceptance: AcceptanceModel;
  private readonly cost: SpeculatorConfig['cost'];
  private readonly margin: number;
  private readonly probeInterval: number;
  private offers: DraftOffer[] = [];
  private probs: Float64Array[] = [];
  /** Steps planned since the last one that probed. */
  private stepsSinceProbe: number;

  constructor(config: SpeculatorConfig) {
    if (!Number.isInteger(config.maxDraftTokens) || config.maxDraftTokens < 1) throw new RangeError('maxDraftTokens must be a positive integer');
    this.maxDraftTokens = config.maxDraftTokens;
    this.cost = config.cost;
    this.margin = config.margin ?? 0.05;
    this.probeInterval = config.probeInterval ?? 16;
    this.stepsSinceProbe = 0;
    this.acceptance = new AcceptanceModel(config.acceptance ?? ACCEPTANCE_DEFAULTS);
    this.counters = new SpecCounters(config.maxDraftTokens);
  }

  /**
   * Drafts to verify for each of `decodes` (the step's decoding sequences), given `caps[i]`: the
   * most sequence i may take (its drafts, token budget, max_tokens and model length already
   * applied). `prefillTokens`: the step's prefill chunk tokens, priced into its cost.
   */
  plan(decodes: readonly DraftingSequence[], caps: ArrayLike<number>, prefillTokens: number, kvUsage: number): Int32Array {
    const n = decodes.length;
    this.cost.shape?.(n, prefillTokens, kvUsage);
    while (this.offers.length < n) {
      this.offers.push({ numDrafts: 0, accept: new Float64Array(0) });
      this.probs.push(new Float64Array(this.maxDraftTokens));
    }
    const offers = this.offers.slice(0, n);
    for (let i = 0; i < n; i++) {
      const seq = decodes[i]!;
      const k = Math.max(0, Math.min(caps[i] ?? 0, this.maxDraftTokens, seq.draftTokens?.length ?? 0));
      const p = this.probs[i]!;
      if (k > 0) this.acceptance.estimate(seq, seq.draftScores, k, p);
      offers[i] = { numDrafts: k, accept: p };
    }
    const plan = planDrafts({ offers, baseTokens: n + prefillTokens, numDecodes: n, stepMs: (t) => this.cost.stepMs(t), margin: this.margin });
    // Sequences kept off (drafts on offer, none planned) verify one draft now and then, so their
    // estimates can recover and the cost of one more token gets measured: in one step of
    // `probeInterval`, worker-wide, at most one per 50 decodes, the longest-waiting first.
    // Why worker-wide: a step with a verifying sequence costs more than its one extra token
    // (CPU, tiny model, batch 64: +4.7% and +6.4% in two runs for one draft, where the token
    // alone is +1.6%), and when every sequence was due every 16 steps a large batch probed in
    // every step, a constant tax on a workload whose drafts never pay
    // (bench/speculative-bench.ts, reject case).
    this.stepsSinceProbe++;
    let probes = this.stepsSinceProbe >= this.probeInterval ? Math.max(1, Math.floor(n / 50)) : 0;
    while (probes-- > 0) {
      let pick = -1;
      for (let i = 0; i < n; i++) {
        if (plan.lengths[i] !== 0 || offers[i]!.numDrafts === 0) continue;
        if (pick < 0 || decodes[i]!.numStepsSinceVerify > decodes[pick]!.numStepsSinceVerify) pick = i;
      }
      if (pick < 0) break;
      plan.lengths[pick] = 1;
      this.stepsSinceProbe = 0;
    }
    return plan.lengths;
  }

  /** Whether asking the drafter for proposals can pay in a step of this many decodes. */
  wantDrafts(numDecodes: number, prefillTokens: number, kvUsage: number): boolean {
    const n = Math.max(1, numDecodes);
    this.cost.shape?.(n, prefillTokens, kvUsage);
    // Ask whenever the best case pays, while the cost of one more token is unmeasured (the
    // probes measure it), and before a probe step. The last keeps speculation from turning off
    // for good: step times measured on a loaded machine can make even the best case look
    // unpaying, and without drafts nothing would verify, so nothing would measure again
    // (test/e2e-native/speculative-tiers.test.ts under load: 0 drafts in 128 cycling tokens).
    if (this.cost.has !== undefined && !this.cost.has(n + prefillTokens + 1)) return true;
    if (this.stepsSinceProbe + 1 >= this.probeInterval) return true;
    return draftsCanPay(n, n + prefillTokens, this.maxDraftTokens, (t) => this.cost.stepMs(t), this.margin);
  }

  /** The engine loop's measurement: a step of `tokens` tokens (no prefill chunk) took `ms`. */
  observeStep(tokens: number, ms: number): void {
    this.cost.observe?.(tokens, ms);
  }

  /** A sequence verified `numDrafts` drafts and `accepted` of them were kept (after the step). */
  record(seq: DraftingSequence, numDrafts: number, accepted: number): void {
    if (numDrafts <= 0) {
      seq.numStepsSinceVerify++;
      return;
    }
    const judged = Math.min(numDrafts, accepted + 1);
    seq.draftExpected += this.acceptance.record(seq.draftScores, judged, accepted);
    seq.numDraftTokensJudged += judged;
    seq.numDraftTokensAccepted += accepted;
    seq.numStepsSinceVerify = 0;
    this.counters.record(numDrafts, accepted);
  }
}
