/**
 * Token ids -> text, incrementally, never splitting a UTF-8 character. Two strategies behind
 * one interface:
 *  - ByteLevelTextStream: byte-level BPE. Each token is a run of bytes from a flat table; a
 *    streaming TextDecoder holds back an incomplete trailing character by itself. O(1) per
 *    token and no library call.
 *  - WindowedTextStream: any tokenizer (sentencepiece-style Metaspace, byte fallback). As in
 *    vLLM / HF TextStreamer: decode a short window before and after the new token and emit the
 *    difference, holding back while the decoded tail ends in U+FFFD (an incomplete character).
 */
import type { HfTokenizer, TokenBytesTable } from './tokenizer.js';

export interface TokenTextStream {
  /** Append one token; returns the text it completes ('' when it only adds partial bytes). */
  push(tokenId: number): string;
  /** End of stream: whatever is still held, with incomplete bytes as U+FFFD. */
  finish(): string;
}

export interface TextStreamOptions {
  skipSpecialTokens: boolean;
  /** Tail of the prompt, so the first output token decodes with its real left context. */
  contextTokenIds?: ArrayLike<number>;
}

export function createTextStream(tokenizer: HfTokenizer, options: TextStreamOptions): TokenTextStream {
  if (tokenizer.tokenBytes) return new ByteLevelTextStream(tokenizer.tokenBytes, tokenizer.specialMask, options.skipSpecialTokens);
  return new WindowedTextStream(tokenizer, options);
}

export class ByteLevelTextStream implements TokenTextStream {
  private readonly decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

  constructor(
    private readonly table: TokenBytesTable,
    private readonly specialMask: Uint8Array,
    private readonly skipSpecialTokens: boolean,
  ) {}

  push(tokenId: number): string {
    const { bytes, offsets } = this.table;
    if (tokenId < 0 || tokenId + 1 >= offsets.length) return '';
    const piece = bytes.subarray(offsets[tokenId]!, offsets[tokenId + 1]!);
    if (this.specialMask[tokenId] !== 1) return this.decoder.decode(piece, { stream: true });
    if (this.skipSpecialTokens) return '';
    // A special token is literal text that ends any partial character before it (decode()
    // without stream flushes it as U+FFFD), as the library's decoder does.
    return this.decoder.decode() + this.decoder.decode(piece);
  }

  finish(): string {
    return this.decoder.decode();
  }
}

/** Tokens kept before prefixOffset are dropped once they pile up past this. */
const COMPACT_AFTER = 1024;
/** Prompt tokens used as left context (vLLM uses 5). */
const CONTEXT_TOKENS = 5;

export class WindowedTextStream implements TokenTextStream {
  private tokens: number[];
  private prefixOffset: number;
  private readOffset: number;
  private readonly skipSpecialTokens: boolean;

  constructor(
    private readonly tokenizer: HfTokenizer,
    options: TextStreamOptions,
  ) {
    this.skipSpecialTokens = options.skipSpecialTokens;
    // Only the prompt's tail: never copy (or decode) a whole long prompt.
    const ctx = options.contextTokenIds ?? [];
    this.tokens = [];
    for (let i = Math.max(0, ctx.length - CONTEXT_TOKENS); i < ctx.length; i++) this.tokens.push(ctx[i]!);
    this.prefixOffset = 0;
    this.readOffset = this.tokens.length;
  }

  push(tokenId: number): string {
    this.tokens.push(tokenId);
    const opts = { skipSpecialTokens: this.skipSpecialTokens };
    const prefixText = this.tokenizer.decode(this.tokens.slice(this.prefixOffset, this.readOffset), opts);
    const fullText = this.tokenizer.decode(this.tokens.slice(this.prefixOffset), opts);
    if (fullText.length <= prefixText.length || fullText.endsWith('\uFFFD')) return '';
    const delta = fullText.slice(prefixText.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.tokens.length;
    if (this.prefixOffset > COMPACT_AFTER) {
      this.tokens = this.tokens.slice(this.prefixOffset);
      this.readOffset -= this.prefixOffset;
      this.prefixOffset = 0;
    }
    return delta;
  }

  finish(): string {
    const opts = { skipSpecialTokens: this.skipSpecialTokens };
    const prefixText = this.tokenizer.decode(this.tokens.slice(this.prefixOffset, this.readOffset), opts);
    const fullText = this.tokenizer.decode(this.tokens.slice(this.prefixOffset), opts);
    this.prefixOffset = this.readOffset = this.tokens.length;
    return fullText.length > prefixText.length ? fullText.slice(prefixText.length) : '';
  }
}
