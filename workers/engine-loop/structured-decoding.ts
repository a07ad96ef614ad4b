/**
 * StructuredDecoding: the engine loop's grammar state, one GrammarMatcher per constrained
 * sequence. Per step:
 *
 *   prepare(batch)   before engine.step: each sampled constrained sequence gets its bitmask
 *                    (`StepSequence.allowedTokens`), in closing mode when its token budget is
 *                    down to what the grammar needs to finish
 *   advance(result)  after engine.step: each sampled token goes through its matcher; sequences
 *                    whose grammar terminated must stop ("stop"), a rejected token is a bug
 *                    (the engine ignored the mask) and fails that request
 *
 * Unconstrained sequences pay one Map lookup per step, and nothing when no sequence in the
 * worker is constrained. The loop does not call prepare() itself: it hands it to the engine
 * as `StepBatch.prepareSampling`, which the engine calls once its forward pass is under way
 * (native: on its own thread; mocker: its simulated step time), so mask work on the JS
 * thread overlaps the compute.
 */
import type { GrammarMatcher } from '../../grammar/index.js';
import { GrammarError, bitmaskWords } from '../../grammar/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';
import type { StepBatch, StepResult } from '../engines/engine.js';

/** Where matchers come from: the worker's compiled-grammar cache over its tokenizer's vocabulary. */
export interface GrammarProvider {
  /** Mask size: the vocabulary the grammar was compiled against. */
  readonly vocabSize: number;
  /** A fresh matcher at the start of the output; throws GrammarError (invalid_argument). */
  matcherFor(spec: StructuredOutputSpec): GrammarMatcher;
  /**
   * Optional: compile `spec`'s grammar off the event loop, within its budget. Undefined when it
   * is ready; the promise resolves when it is (or when `signal` aborts, which cancels the
   * compile) and rejects with a GrammarError for a spec that does not compile or runs past
   * its budget.
   */
  prepare?(spec: StructuredOutputSpec, signal?: AbortSignal): Promise<void> | undefined;
}

/**
 * Closing mode starts when the tokens left (after this one's EOS reserve) are within this many
 * of the bytes the costliest live alternative needs to finish (maxBytesToAccept: a separator
 * that would start another tool call, an optional key). So no token can commit the output to
 * more than the budget holds; the slack covers rises inside one alternative (an escape, a
 * longer branch of a literal). Once on, closing stays on, and every closing token is on a
 * shortest path (at least one byte nearer the end), so the output completes within max_tokens.
 */
export const CLOSING_SLACK_TOKENS = 16;

interface Constrained {
  matcher: GrammarMatcher;
  mask: Uint32Array;
  /** Output tokens this request may still produce before this worker saw any (its max_tokens). */
  budget: number;
  /** Tokens accepted since the matcher was registered (prior outputs not counted). */
  generated: number;
  closing: boolean;
  /** The matcher threw (a grammar-engine bug): this request fails, the batch goes on. */
  broken: boolean;
}

export interface AdvanceOutcome {
  /** Sequences whose grammar is complete with this step's token: finish with "stop". */
  stops: Set<number>;
  /** Sequences whose sampled token the grammar rejected, or whose matcher threw (bugs): fail them. */
  rejected: number[];
}

export interface StructuredStats {
  numConstrained: number;
  /** Masks filled and time spent filling them (ms), since start. */
  numMasks: number;
  maskMs: number;
}

export class StructuredDecoding {
  private readonly bySeq = new Map<number, Constrained>();
  private readonly words: number;
  private readonly empty: AdvanceOutcome = { stops: new Set(), rejected: [] };
  numMasks = 0;
  maskMs = 0;

  constructor(readonly provider: GrammarProvider) {
    this.words = bitmaskWords(provider.vocabSize);
  }

  get size(): number {
    return this.bySeq.size;
  }

  /**
   * A matcher for a new request, with its already-generated tokens (`priorOutputTokens`: the
   * prefill worker's first token on a decode worker, or outputs before a migration) replayed.
   * Throws TandemError invalid_argument when the spec does not compile or a prior token does
   * not fit it. Call before the sequence is added, then `register`.
   */
  create(spec: StructuredOutputSpec, priorOutputTokens: ArrayLike<number>): GrammarMatcher {
    let matcher: GrammarMatcher;
    try {
      matcher = this.provider.matcherFor(spec);
    } catch (err) {
      if (err instanceof TandemError) throw err;
      throw new TandemError('invalid_argument', `structured output: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    }
    for (let i = 0; i < priorOutputTokens.length; i++) {
      if (!matcher.acceptToken(priorOutputTokens[i]!)) {
        throw new TandemError('invalid_argument', `structured output: prior output token ${i} (id ${priorOutputTokens[i]}) does not match the grammar`);
      }
    }
    return matcher;
  }

  /** The provider's off-loop preparation for a new request's grammar (see GrammarProvider.prepare). */
  ready(spec: StructuredOutputSpec, signal?: AbortSignal): Promise<void> | undefined {
    if (this.provider.prepare === undefined) return undefined;
    const asRequestError = (err: unknown): unknown => {
      if (err instanceof GrammarError) return new TandemError('invalid_argument', `structured output: ${err.message}`, { cause: err });
      if (err instanceof TandemError) return err;
      return new TandemError('invalid_argument', `structured output: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    };
    let ready: Promise<void> | undefined;
    try {
      ready = this.provider.prepare(spec, signal);
    } catch (err) {
      throw asRequestError(err);
    }
    return ready?.catch((err: unknown) => {
      throw asRequestError(err);
    });
  }

  register(seqId: number, matcher: GrammarMatcher, budget: number): void {
    this.bySeq.set(seqId, { matcher, mask: new Uint32Array(this.words), budget, generated: 0, closing: false, broken: false });
  }

  remove(seqId: number): void {
    this.bySeq.delete(seqId);
  }

  /** Fills the mask of every sampled constrained sequence in the batch. */
  prepare(batch: StepBatch): void {
    if (this.bySeq.size === 0) return;
    const t0 = performance.now();
    let n = 0;
    for (const s of batch.sequences) {
      if (!s.sample) continue;
      const c = this.bySeq.get(s.seqId);
      if (c === undefined) continue;
      const drafts = s.numDraftTokens ?? 0;
      if (drafts > 0) {
        s.allowedTokens = this.draftMasks(c, s.tokenIds, drafts);
        n += drafts + 1;
        continue;
      }
      try {
        // Tokens left including this one; one is kept for EOS when the grammar needs it to end.
        if (!c.closing) c.closing = c.budget - c.generated <= c.matcher.maxBytesToAccept() + 1 + CLOSING_SLACK_TOKENS;
        c.matcher.fillNextTokenBitmask(c.mask, c.closing ? { closing: true } : undefined);
      } catch {
        // Nothing allowed: whatever the engine samples is rejected in advance(), failing only this request.
        c.broken = true;
        c.mask.fill(0);
      }
      s.allowedTokens = c.mask.subarray(0, this.words);
      n++;
    }
    if (n > 0) {
      this.numMasks += n;
      this.maskMs += performance.now() - t0;
    }
  }

  /**
   * Speculative decoding: one mask row per sampled position of a verify step. Row 0 is the
   * matcher's; row i is a fork's after it accepted drafts 1..i (the state the matcher has if
   * they are accepted), so nothing is ever rolled back: the matcher itself only advances by
   * what the step returns. Closing mode is decided per row, as it would be token by token.
   */
  private draftMasks(c: Constrained, tokenIds: Int32Array, numDrafts: number): Uint32Array {
    const w = this.words;
    if (c.mask.length < (numDrafts + 1) * w) c.mask = new Uint32Array((numDrafts + 1) * w * 2);
    const rows = c.mask.subarray(0, (numDrafts + 1) * w);
    let closing = c.closing;
    let matcher: GrammarMatcher = c.matcher;
    for (let i = 0; i <= numDrafts; i++) {
      const row = rows.subarray(i * w, (i + 1) * w);
      try {
        if (i > 0) {
          matcher = i === 1 ? c.matcher.fork() : matcher;
          // A draft the grammar rejects was cut at proposal time; if one slips through, the rows after it allow nothing.
          if (!matcher.acceptToken(tokenIds[tokenIds.length - numDrafts + i - 1]!)) {
            rows.fill(0, i * w);
            break;
          }
        }
        if (!closing) closing = c.budget - (c.generated + i) <= matcher.maxBytesToAccept() + 1 + CLOSING_SLACK_TOKENS;
        matcher.fillNextTokenBitmask(row, closing ? { closing: true } : undefined);
        if (i === 0) c.closing = closing;
      } catch {
        if (i === 0) c.broken = true;
        rows.fill(0, i * w);
        break;
      }
    }
    return rows;
  }

  /**
   * Feeds the step's returned tokens to their matchers (a verify step returns several). A
   * grammar that ends inside them drops the tokens after its end (the step result is edited),
   * so the sequence stops on its last token with "stop".
   */
  advance(result: StepResult): AdvanceOutcome {
    if (this.bySeq.size === 0) return this.empty;
    let out: AdvanceOutcome | undefined;
    for (const t of result.sampled) {
      const c = this.bySeq.get(t.seqId);
      if (c === undefined) continue;
      const n = 1 + (t.following?.length ?? 0);
      let accepted = 0;
      let terminated = false;
      try {
        while (!c.broken && accepted < n && !terminated) {
          if (!c.matcher.acceptToken(accepted === 0 ? t.tokenId : t.following![accepted - 1]!.tokenId)) break;
          accepted++;
          terminated = c.matcher.isTerminated();
        }
      } catch {
        c.broken = true;
      }
      if (accepted === 0 || (!terminated && accepted < n)) {
        (out ??= { stops: new Set(), rejected: [] }).rejected.push(t.seqId);
        continue;
      }
      c.generated += accepted;
      if (accepted < n) t.following = t.following!.slice(0, accepted - 1);
      if (terminated) {
        (out ??= { stops: new Set(), rejected: [] }).stops.add(t.seqId);
        t.drafts = undefined;
      } else if (t.drafts !== undefined && t.drafts.length > 0) {
        t.drafts = this.grammarPrefix(c.matcher, t.drafts);
      }
    }
    return out ?? this.empty;
  }

  /** The drafts the grammar allows from its current state, up to the first it refuses (or its end). */
  private grammarPrefix(matcher: GrammarMatcher, drafts: Int32Array): Int32Array {
    const fork = matcher.fork();
    let n = 0;
    while (n < drafts.length && fork.acceptToken(drafts[n]!)) {
      n++;
      if (fork.isTerminated()) break;
    }
    return n === drafts.length ? drafts : drafts.subarray(0, n);
  }

  stats(): StructuredStats {
    return { numConstrained: this.bySeq.size, numMasks: this.numMasks, maskMs: this.maskMs };
  }
}

