/**
 * Acceptance estimates for the draft policy (pure). Each draft's chance of being accepted,
 * given the ones before it were, is a base estimate corrected by the sequence's own record:
 *
 *   base(i)  = the drafter's score x the worker's score calibration  (suffix drafts score themselves)
 *            | the worker's per-token acceptance rate                 (n-gram drafts do not)
 *   p(i)     = clamp(base(i) x (accepted + w) / (expected + w), 0, 1)
 *
 * `accepted` / `expected` are the sequence's accepted drafts and the sum of their base
 * estimates over the drafts it had judged (up to each step's first rejection): a sequence whose
 * drafts do better than predicted is trusted more, one whose drafts keep failing is turned
 * down. The worker-wide figures decay (each judged draft weighs `decay` of the one before), so
 * they follow the workload. Worked example: base 0.6, a sequence with 3 accepted of 8 judged
 * at base 0.6 each (expected 4.8), w = 2: p = 0.6 x 5 / 6.8 = 0.44.
 */

export interface AcceptanceOptions {
  /** Pseudo-counts behind each sequence's correction (w). */
  sequenceWeight: number;
  /** The worker-wide rate before anything was judged, and its pseudo-count. */
  priorRate: number;
  priorWeight: number;
  /** Per judged draft, how much the worker-wide sums keep (0..1). */
  decay: number;
}

/** A new worker expects 0.3 of drafts accepted until it has judged a few (n-gram and suffix drafts are right about that often on code and chat). */
export const ACCEPTANCE_DEFAULTS: AcceptanceOptions = { sequenceWeight: 2, priorRate: 0.3, priorWeight: 3, decay: 0.999 };

/** What a sequence carries for its correction (workers/sequence.ts). */
export interface SequenceRecord {
  numDraftTokensJudged: number;
  numDraftTokensAccepted: number;
  draftExpected: number;
}

export class AcceptanceModel {
  private judged = 0;
  private accepted = 0;
  private scoredPredicted = 0;
  private scoredAccepted = 0;

  constructor(private readonly o: AcceptanceOptions = ACCEPTANCE_DEFAULTS) {}

  /** The worker-wide per-token acceptance rate (unscored drafts). */
  get rate(): number {
    return (this.accepted + this.o.priorRate * this.o.priorWeight) / (this.judged + this.o.priorWeight);
  }

  /** Observed over predicted acceptance of scored drafts (1 before any). */
  get calibration(): number {
    return (this.scoredAccepted + this.o.priorWeight) / (this.scoredPredicted + this.o.priorWeight);
  }

  /** The base estimate of a draft with this drafter score (NaN: none). */
  base(score: number): number {
    return Number.isFinite(score) ? clamp01(score) * this.calibration : this.rate;
  }

  /** p(i) for a sequence's drafts, into `out` (length >= n). */
  estimate(seq: SequenceRecord, scores: ArrayLike<number> | undefined, n: number, out: Float64Array): void {
    const w = this.o.sequenceWeight;
    const correction = (seq.numDraftTokensAccepted + w) / (seq.draftExpected + w);
    for (let i = 0; i < n; i++) out[i] = clamp01(this.base(scores?.[i] ?? NaN) * correction);
  }

  /**
   * One sequence's verify result: `judged` drafts were compared (accepted ones and the first
   * rejected), `accepted` of them kept. Returns the sum of their base estimates (the
   * sequence's `draftExpected` grows by it).
   */
  record(scores: ArrayLike<number> | undefined, judged: number, accepted: number): number {
    let expected = 0;
    for (let i = 0; i < judged; i++) {
      const score = scores?.[i] ?? NaN;
      const base = this.base(score);
      expected += base;
      const ok = i < accepted ? 1 : 0;
      this.judged = this.judged * this.o.decay + 1;
      this.accepted = this.accepted * this.o.decay + ok;
      if (Number.isFinite(score)) {
        this.scoredPredicted = this.scoredPredicted * this.o.decay + clamp01(score);
        this.scoredAccepted = this.scoredAccepted * this.o.decay + ok;
      }
    }
    return expected;
  }
}

function clamp01(p: number): number {
  return p > 0 ? (p < 1 ? p : 1) : 0;
}
