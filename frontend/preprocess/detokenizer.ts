/**
 * IncrementalDetokenizer: turns a worker's token stream into the text a client may see.
 *   token ids --TokenTextStream--> complete UTF-8 text --StopStringMatcher--> emitted text
 * - never emits a broken character (the text stream holds partial bytes);
 * - stop strings match across token boundaries and the output is trimmed at the match;
 * - stop token ids (EOS and the request's stop_token_ids) end the stream unprinted;
 * - flush() releases what is held back when the stream ends for another reason (length).
 * Once finished it ignores further tokens, so a worker that overshoots a stop cannot leak text.
 */
import { StopStringMatcher } from './stop-strings.js';
import { createTextStream, type TokenTextStream } from './token-text.js';
import type { HfTokenizer } from './tokenizer.js';

export interface DetokenizerOptions {
  /** Stop strings (OpenAI `stop`). */
  stop?: readonly string[];
  /** Token ids that end generation unprinted: EOS ids and `stop_token_ids`, minus any ignore_eos removes. */
  stopTokenIds?: readonly number[];
  /** Keep the matched stop string in the output. Default false. */
  includeStopStrInOutput?: boolean;
  /** Default true. */
  skipSpecialTokens?: boolean;
  /** The prompt's token ids; only the tail is used, as left context for non-byte-level tokenizers. */
  promptTokenIds?: ArrayLike<number>;
}

/** Why the detokenizer ended generation: it only ever decides 'stop'; 'length' is the worker's. */
export type DetokenizerFinishReason = 'stop';

export class IncrementalDetokenizer {
  private readonly stream: TokenTextStream;
  private readonly matcher: StopStringMatcher;
  private readonly stopTokenIds: ReadonlySet<number>;
  private finished = false;
  private reason: string | number | undefined;
  private consumed = 0;
  private flushed = false;

  constructor(tokenizer: HfTokenizer, options: DetokenizerOptions = {}) {
    const streamOptions = { skipSpecialTokens: options.skipSpecialTokens ?? true, ...(options.promptTokenIds ? { contextTokenIds: options.promptTokenIds } : {}) };
    this.stream = createTextStream(tokenizer, streamOptions);
    this.matcher = new StopStringMatcher(options.stop ?? [], options.includeStopStrInOutput ?? false);
    this.stopTokenIds = new Set(options.stopTokenIds ?? []);
  }

  /** True once a stop token or stop string ended the stream. */
  get isFinished(): boolean {
    return this.finished;
  }

  get finishReason(): DetokenizerFinishReason | undefined {
    return this.finished ? 'stop' : undefined;
  }

  /** The stop string or stop token id that ended the stream (OpenAI/vLLM `stop_reason`). */
  get stopReason(): string | number | undefined {
    return this.reason;
  }

  /** Tokens accepted so far, including the one that finished the stream. */
  get numTokens(): number {
    return this.consumed;
  }

  /** Feed one token; returns the text that became safe to emit. */
  push(tokenId: number): string {
    if (this.finished) return '';
    this.consumed++;
    if (this.stopTokenIds.has(tokenId)) {
      this.finished = true;
      this.reason = tokenId;
      return this.release();
    }
    const text = this.stream.push(tokenId);
    if (text.length === 0) return '';
    const out = this.matcher.push(text);
    if (this.matcher.matched !== undefined) {
      this.finished = true;
      this.reason = this.matcher.matched;
    }
    return out;
  }

  /** Feed several tokens (a batched delta); stops consuming at the first finish. */
  pushMany(tokenIds: ArrayLike<number>): string {
    let text = '';
    for (let i = 0; i < tokenIds.length && !this.finished; i++) text += this.push(tokenIds[i]!);
    return text;
  }

  /** The stream ended without a stop (max_tokens, cancellation): release everything held. */
  flush(): string {
    if (this.finished) return '';
    return this.release();
  }

  private release(): string {
    if (this.flushed) return '';
    this.flushed = true;
    // Trailing partial bytes decode to U+FFFD; they still go through the matcher so a stop
    // string is honoured even at the very end.
    const tail = this.stream.finish();
    const out = tail.length > 0 ? this.matcher.push(tail) : '';
    if (this.matcher.matched !== undefined) {
      this.finished = true;
      this.reason = this.matcher.matched;
      return out;
    }
    return out + this.matcher.flush();
  }
}
