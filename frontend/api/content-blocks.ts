/**
 * The one content-block sequencer: how the APIs whose output is a list of typed parts — Anthropic
 * Messages' content blocks, Responses' output items — cut the model's text into those parts.
 *
 * The text goes through the shared ChatOutputParser (reasoning split, tool-call parsing); each
 * ChatOutputStep's reasoning, content and tool calls become blocks of three kinds, in the order
 * the model produced them: a block opens when text of another kind arrives (or a new call
 * begins), takes its deltas, and closes when the next one opens or the output ends. A codec only
 * supplies hooks (`open`, `delta`, `close`) that write its own frames or collect its own unary
 * body; the stream and the unary answer of one API run the same sequence, so they cannot differ.
 *
 * Along the way it counts reasoning tokens (ChatOutputParser.reasoningTokens) and hands each text
 * delta the logprobs of the tokens that made it: tokens spent reasoning or on a tool call's markup
 * carry none, and text the parsers held back gets its tokens' logprobs when it comes out.
 */
import type { TokenLogprob } from '../../proto/wire.js';
import { chatOutputParser, type ChatFinishReason, type ChatOutputParser, type ChatOutputStep } from '../openai/chat-output.js';
import type { OpenAiFinishReason, PreparedGeneration } from '../pipeline/generation.js';

export type BlockKind = 'reasoning' | 'text' | 'tool_call';

export interface Block {
  readonly kind: BlockKind;
  /** Its place among the output's blocks, from 0. */
  readonly index: number;
  /** What it said so far: reasoning or text, or a call's argument text ('' unless the hooks keep text). */
  text: string;
  /** A tool call's id and name. */
  readonly call: { id: string; name: string } | undefined;
  /** A text block's token logprobs so far (empty unless the request asked for logprobs). */
  readonly logprobs: TokenLogprob[];
}

/** What a codec does at each point of the sequence; `C` is what its calls pass through (a FrameSink, or nothing). */
export interface BlockHooks<C> {
  /** Whether `close` reads `block.text` (a unary body, Responses' done events): only then is the text kept, one concatenation per delta. */
  readonly keepsText: boolean;
  open(block: Block, ctx: C): void;
  /** One piece of `block`'s text (already added to `block.text` when kept) and its tokens' logprobs; returns the send's backpressure. */
  delta(block: Block, text: string, logprobs: readonly TokenLogprob[], ctx: C): Promise<void> | undefined;
  close(block: Block, ctx: C): void;
}

/** How the output ended, as the API reports it. */
export interface BlocksEnd {
  /** The pipeline's reason, or `tool_calls` when the turn ended in calls. */
  finishReason: ChatFinishReason;
  reasoningTokens: number;
}

const NO_LOGPROBS: readonly TokenLogprob[] = Object.freeze([]);

export class BlockSequencer<C> {
  private readonly parser: ChatOutputParser | undefined;
  private readonly wantsLogprobs: boolean;
  private current: Block | undefined;
  private count = 0;
  private lastCall: { id: string; name: string } | undefined;
  /** Logprobs of tokens whose text has not come out yet. */
  private pending: TokenLogprob[] = [];

  constructor(
    prepared: PreparedGeneration,
    private readonly hooks: BlockHooks<C>,
    newCallId?: () => string,
  ) {
    this.parser = chatOutputParser(prepared.input, newCallId);
    this.wantsLogprobs = prepared.input.logprobs !== undefined;
  }

  /** One piece of model text, made by `tokens` generated tokens with these logprobs. */
  push(text: string, tokens: number, logprobs: readonly TokenLogprob[] | undefined, ctx: C): Promise<void> | undefined {
    const parser = this.parser;
    if (!parser) {
      this.keep(logprobs);
      return text.length > 0 ? this.deltaIn('text', text, ctx) : undefined;
    }
    const reasonedBefore = parser.reasoningTokens;
    const step = parser.push(text, tokens);
    // Tokens counted as reasoning (this push's, and any undecided before it) carry no logprobs.
    if (parser.reasoningTokens > reasonedBefore) this.pending = [];
    else this.keep(logprobs);
    return this.step(step, ctx);
  }

  /** End of output: what the parsers held back, the last block closed. */
  finish(reason: OpenAiFinishReason, ctx: C): BlocksEnd {
    if (this.parser) this.step(this.parser.finish(), ctx);
    this.close(ctx);
    return { finishReason: this.parser ? this.parser.finishReason(reason) : reason, reasoningTokens: this.parser?.reasoningTokens ?? 0 };
  }

  private keep(logprobs: readonly TokenLogprob[] | undefined): void {
    if (this.wantsLogprobs && logprobs !== undefined) for (const lp of logprobs) this.pending.push(lp);
  }

  private step(step: ChatOutputStep, ctx: C): Promise<void> | undefined {
    let backpressure: Promise<void> | undefined;
    if (step.reasoning.length > 0) backpressure = this.deltaIn('reasoning', step.reasoning, ctx);
    if (step.content.length > 0) backpressure = this.deltaIn('text', step.content, ctx);
    for (const call of step.toolCalls) {
      if (call.id !== undefined) {
        this.lastCall = { id: call.id, name: call.name ?? '' };
        this.openBlock('tool_call', ctx);
        // A call's markup tokens are not text: their logprobs go nowhere.
        this.pending = [];
      }
      if (call.arguments !== undefined && call.arguments.length > 0) backpressure = this.deltaIn('tool_call', call.arguments, ctx);
    }
    return backpressure;
  }

  private deltaIn(kind: BlockKind, text: string, ctx: C): Promise<void> | undefined {
    if (this.current?.kind !== kind) this.openBlock(kind, ctx);
    const block = this.current!;
    if (this.hooks.keepsText) block.text += text;
    let logprobs = NO_LOGPROBS;
    if (kind === 'text' && this.pending.length > 0) {
      logprobs = this.pending;
      for (const lp of logprobs) block.logprobs.push(lp);
      this.pending = [];
    }
    return this.hooks.delta(block, text, logprobs, ctx);
  }

  private openBlock(kind: BlockKind, ctx: C): void {
    this.close(ctx);
    const block: Block = { kind, index: this.count++, text: '', call: kind === 'tool_call' ? this.lastCall : undefined, logprobs: [] };
    this.current = block;
    this.hooks.open(block, ctx);
  }

  private close(ctx: C): void {
    const block = this.current;
    if (block === undefined) return;
    this.current = undefined;
    this.hooks.close(block, ctx);
  }
}
