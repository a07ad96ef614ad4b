/**
 * Speculative decoding's running totals, as vLLM counts them (its `vllm:spec_decode_*`
 * counters, which the worker exports under the same names):
 *   drafts           verify steps of one sequence (one per sequence per step with drafts)
 *   draftTokens      drafts verified
 *   acceptedTokens   drafts accepted
 *   acceptedPerPos   [i]: verify steps whose draft i (0-based) was accepted
 * Mean acceptance length = 1 + acceptedTokens / drafts; acceptance rate = acceptedTokens / draftTokens.
 */
export interface SpecTotals {
  drafts: number;
  draftTokens: number;
  acceptedTokens: number;
  acceptedPerPos: number[];
}

export class SpecCounters implements SpecTotals {
  drafts = 0;
  draftTokens = 0;
  acceptedTokens = 0;
  readonly acceptedPerPos: number[];

  constructor(maxDraftTokens: number) {
    this.acceptedPerPos = new Array<number>(maxDraftTokens).fill(0);
  }

  record(numDrafts: number, accepted: number): void {
    this.drafts++;
    this.draftTokens += numDrafts;
    this.acceptedTokens += accepted;
    for (let i = 0; i < accepted && i < this.acceptedPerPos.length; i++) this.acceptedPerPos[i]!++;
  }

  snapshot(): SpecTotals {
    return { drafts: this.drafts, draftTokens: this.draftTokens, acceptedTokens: this.acceptedTokens, acceptedPerPos: [...this.acceptedPerPos] };
  }
}
