/**
 * The grammar engine's contract with its callers (the frontend validates specs; workers mask
 * sampling). Implementations live beside this file; callers import from grammar/index.ts.
 */
import { TandemError } from '../runtime/errors.js';

/** A tokenizer's vocabulary as bytes: what a token appends to the output when sampled. */
export interface Vocabulary {
  /** Stable identity (hash of the token bytes and EOS ids): part of the compiled-grammar cache key. */
  readonly id: string;
  readonly size: number;
  /**
   * token id -> UTF-8 bytes it decodes to (byte-level BPE and byte-fallback tokens decoded);
   * null for special tokens, which a grammar never allows except EOS at an accepting state.
   */
  readonly tokenBytes: ReadonlyArray<Uint8Array | null>;
  /** Tokens that end the sequence; allowed exactly where the grammar accepts. */
  readonly eosTokenIds: readonly number[];
}

/** Why a spec could not be compiled. The message names the feature or the position. */
/** `budget_exceeded`: the compile ran past its time or memory budget (grammar/budget.ts). */
export type GrammarErrorKind = 'invalid_schema' | 'unsupported_feature' | 'invalid_regex' | 'invalid_grammar' | 'budget_exceeded';

export class GrammarError extends TandemError {
  override readonly name = 'GrammarError';
  constructor(
    readonly kind: GrammarErrorKind,
    message: string,
  ) {
    super('invalid_argument', message);
  }
}

/**
 * Per-sequence matching state. One per constrained sequence; not shared between sequences.
 * The bitmask layout is XGrammar's: bit (id & 31) of word (id >> 5) set = token allowed.
 */
export interface GrammarMatcher {
  /**
   * Write the allowed-token bitmask for the next step into `mask` (length >= bitmaskWords(size)).
   * EOS bits are set iff the grammar can terminate here. With `closing`, only tokens on a
   * shortest path to acceptance are allowed, so a sequence near its token budget still ends
   * in a complete, parseable output.
   */
  fillNextTokenBitmask(mask: Uint32Array, options?: { closing?: boolean }): void;
  /** Advance by a sampled token. Returns false (state unchanged) when the grammar rejects it. */
  acceptToken(tokenId: number): boolean;
  /** The output so far is a complete match. */
  canTerminate(): boolean;
  /** EOS was accepted, or no byte can follow: generation must stop. */
  isTerminated(): boolean;
  /** Fewest bytes that complete a match from here (0 when canTerminate()). */
  minBytesToAccept(): number;
  /**
   * The most bytes the output may need to finish after the next token, whichever token the
   * grammar allows (>= minBytesToAccept()): what one token can commit the output to (a
   * separator that starts another tool call, an optional key). Closing mode starts early
   * enough for this, not just for the minimum.
   */
  maxBytesToAccept(): number;
  /**
   * A copy of the matcher at its current state, advanced on its own. Speculative decoding masks
   * each draft position from a fork that accepted the drafts before it, so the matcher itself
   * only ever advances by tokens the engine returned: rejected drafts need no rollback.
   */
  fork(): GrammarMatcher;
}

export function bitmaskWords(vocabSize: number): number {
  return (vocabSize + 31) >>> 5;
}
