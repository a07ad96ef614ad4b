/**
 * OpenAI response shapes: streaming chunks and unary bodies, one writer and one collector each
 * for chat and for completions (the codecs in api/openai-codecs.ts pick theirs), and the two
 * logprob layouts. The per-token path serializes plain-text chunks from a precomputed head and
 * tail, so only the text itself goes through JSON.stringify.
 *
 * A chat response whose request has tools to call or whose model has a reasoning parser runs
 * its text through a ChatOutputParser (chat-output.ts) first: its chunks then carry
 * `reasoning_content` and `tool_calls` deltas, and its unary message those fields.
 */
import type { TokenLogprob } from '../../proto/wire.js';
import type { ModelCodec } from '../codec.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../pipeline/generation.js';
import { type ChatFinishReason, type ChatOutputParser, type ChatOutputStep, chatOutputParser, toolCallBody, toolCallDeltaBody } from './chat-output.js';

export interface OpenAiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usageBody(usage: Usage): OpenAiUsage {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedTokens },
  };
}

/** Logprob text for a token: `token_id:N` when the client asked for ids. */
export class TokenNamer {
  constructor(
    private readonly codec: ModelCodec,
    private readonly asIds: boolean,
  ) {}

  name(tokenId: number): string {
    return this.asIds ? `token_id:${tokenId}` : this.codec.tokenText(tokenId);
  }
}

// JSON has no -Infinity; vLLM clamps the same way.
const finiteLogprob = (lp: number): number => (Number.isFinite(lp) ? lp : -9999);
const utf8Bytes = (text: string): number[] => Array.from(Buffer.from(text, 'utf8'));

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export function chatLogprobs(entries: readonly TokenLogprob[], namer: TokenNamer): ChatLogprobEntry[] {
  return entries.map((e) => {
    const token = namer.name(e.tokenId);
    return {
      token,
      logprob: finiteLogprob(e.logprob),
      bytes: utf8Bytes(token),
      top_logprobs: e.top.map((t) => {
        const alt = namer.name(t.tokenId);
        return { token: alt, logprob: finiteLogprob(t.logprob), bytes: utf8Bytes(alt) };
      }),
    };
  });
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Array<Record<string, number>>;
  text_offset: number[];
}

export function emptyCompletionLogprobs(): CompletionLogprobs {
  return { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
}

/** Append entries; `offset` is the completion-text offset of the first entry. Returns the next offset. */
export function appendCompletionLogprobs(out: CompletionLogprobs, entries: readonly TokenLogprob[], namer: TokenNamer, offset: number): number {
  for (const e of entries) {
    const token = namer.name(e.tokenId);
    out.tokens.push(token);
    out.token_logprobs.push(finiteLogprob(e.logprob));
    const top: Record<string, number> = {};
    for (const t of e.top) top[namer.name(t.tokenId)] = finiteLogprob(t.logprob);
    out.top_logprobs.push(top);
    out.text_offset.push(offset);
    offset += token.length;
  }
  return offset;
}

/** What both OpenAI streams share: the chunk head (id, object, created, model), the usage chunk, logprob naming. */
abstract class OpenAiChunks {
  protected readonly head: string;
  /** `,"usage":null` on every chunk when the request asked for usage (OpenAI's shape), else ''. */
  protected readonly usageNull: string;
  protected readonly namer: TokenNamer;

  constructor(
    protected readonly prepared: PreparedGeneration,
    object: string,
  ) {
    this.usageNull = prepared.input.includeUsage ? ',"usage":null' : '';
    this.head = `{"id":${JSON.stringify(prepared.id)},"object":"${object}","created":${prepared.created},"model":${JSON.stringify(prepared.input.model)}`;
    this.namer = new TokenNamer(prepared.codec, prepared.input.returnTokensAsTokenIds);
  }

  protected wantsLogprobs(logprobs: readonly TokenLogprob[] | undefined): logprobs is readonly TokenLogprob[] {
    return logprobs !== undefined && this.prepared.input.logprobs !== undefined;
  }

  usage(usage: Usage): string {
    return `${this.head},"choices":[],"usage":${JSON.stringify(usageBody(usage))}}`;
  }
}

/**
 * The SSE chunks of one streamed chat completion. The per-token path serializes plain-text
 * chunks from a precomputed head and tail, so only the text goes through JSON.stringify.
 */
export class ChatChunkWriter extends OpenAiChunks {
  private readonly textTail: string;
  /** Set when the chat text must be split into reasoning, content and tool calls: use `outputDeltas`. */
  readonly output: ChatOutputParser | undefined;

  constructor(prepared: PreparedGeneration, newToolCallId?: () => string) {
    super(prepared, 'chat.completion.chunk');
    this.output = chatOutputParser(prepared.input, newToolCallId);
    this.textTail = `},"logprobs":null,"finish_reason":null}]${this.usageNull}}`;
  }

  /** Chat streams open with the assistant role. */
  roleChunk(): string {
    return `${this.head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.usageNull}}`;
  }

  delta(text: string, logprobs: readonly TokenLogprob[] | undefined): string {
    if (!this.wantsLogprobs(logprobs)) return `${this.head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}${this.textTail}`;
    return `${this.head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":${JSON.stringify({ content: chatLogprobs(logprobs, this.namer) })},"finish_reason":null}]${this.usageNull}}`;
  }

  /**
   * With an output parser: the chunks for the next text (reasoning, then content, then one
   * chunk per tool-call delta). Logprobs ride on a content chunk, empty if the text was held back.
   */
  outputDeltas(text: string, logprobs: readonly TokenLogprob[] | undefined): string[] {
    return this.stepChunks(this.output!.push(text), logprobs);
  }

  /** With an output parser: the chunks for what it held back, before `finish`. */
  outputEnd(): string[] {
    return this.stepChunks(this.output!.finish(), undefined);
  }

  private stepChunks(step: ChatOutputStep, logprobs: readonly TokenLogprob[] | undefined): string[] {
    const chunks: string[] = [];
    if (step.reasoning.length > 0) chunks.push(this.deltaChunk(`{"reasoning_content":${JSON.stringify(step.reasoning)}}`));
    if (step.content.length > 0 || (this.wantsLogprobs(logprobs) && logprobs.length > 0)) chunks.push(this.delta(step.content, logprobs));
    for (const call of step.toolCalls) chunks.push(this.deltaChunk(`{"tool_calls":[${JSON.stringify(toolCallDeltaBody(call))}]}`));
    return chunks;
  }

  private deltaChunk(delta: string): string {
    return `${this.head},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":null}]${this.usageNull}}`;
  }

  /** The reason this stream reports: a response that called tools stopped to call them. */
  finishReason(pipelineReason: OpenAiFinishReason): ChatFinishReason {
    return this.output ? this.output.finishReason(pipelineReason) : pipelineReason;
  }

  finish(pipelineReason: OpenAiFinishReason): string {
    return `${this.head},"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"${this.finishReason(pipelineReason)}"}]${this.usageNull}}`;
  }
}

/** The SSE chunks of one streamed text completion. */
export class CompletionChunkWriter extends OpenAiChunks {
  private readonly textTail: string;
  private textOffset = 0;

  constructor(prepared: PreparedGeneration) {
    super(prepared, 'text_completion');
    this.textTail = `,"logprobs":null,"finish_reason":null}]${this.usageNull}}`;
  }

  delta(text: string, logprobs: readonly TokenLogprob[] | undefined): string {
    if (!this.wantsLogprobs(logprobs)) return `${this.head},"choices":[{"index":0,"text":${JSON.stringify(text)}${this.textTail}`;
    const lp = emptyCompletionLogprobs();
    appendCompletionLogprobs(lp, logprobs, this.namer, this.textOffset);
    this.textOffset += text.length;
    return `${this.head},"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":${JSON.stringify(lp)},"finish_reason":null}]${this.usageNull}}`;
  }

  finish(reason: OpenAiFinishReason): string {
    return `${this.head},"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"${reason}"}]${this.usageNull}}`;
  }
}

/** A unary chat completion, accumulated. */
export class ChatUnaryCollector {
  private text = '';
  private readonly entries: ChatLogprobEntry[] = [];
  private readonly namer: TokenNamer;
  private readonly output: ChatOutputParser | undefined;

  constructor(
    private readonly prepared: PreparedGeneration,
    newToolCallId?: () => string,
  ) {
    this.namer = new TokenNamer(prepared.codec, prepared.input.returnTokensAsTokenIds);
    this.output = chatOutputParser(prepared.input, newToolCallId);
  }

  add(text: string, logprobs: readonly TokenLogprob[] | undefined): void {
    if (logprobs !== undefined && this.prepared.input.logprobs !== undefined) this.entries.push(...chatLogprobs(logprobs, this.namer));
    this.text += text;
  }

  body(reason: OpenAiFinishReason, usage: Usage): object {
    const { prepared } = this;
    // Parsed first: the finish reason depends on whether it found tool calls.
    const message = this.output ? this.parsedMessage() : { role: 'assistant', content: this.text };
    return {
      id: prepared.id,
      object: 'chat.completion',
      created: prepared.created,
      model: prepared.input.model,
      choices: [
        {
          index: 0,
          message,
          logprobs: prepared.input.logprobs !== undefined ? { content: this.entries } : null,
          finish_reason: this.output ? this.output.finishReason(reason) : reason,
        },
      ],
      usage: usageBody(usage),
    };
  }

  /** OpenAI's message with tool calls (content null beside them when empty) and reasoning. */
  private parsedMessage(): object {
    const out = this.output!.parseAll(this.text);
    const calls = out.toolCalls.length > 0;
    return {
      role: 'assistant',
      content: calls && out.content.length === 0 ? null : out.content,
      ...(out.reasoning !== undefined ? { reasoning_content: out.reasoning.length > 0 ? out.reasoning : null } : {}),
      ...(calls ? { tool_calls: out.toolCalls.map(toolCallBody) } : {}),
    };
  }
}

/** A unary text completion, accumulated. */
export class CompletionUnaryCollector {
  private text = '';
  private readonly lp = emptyCompletionLogprobs();
  private readonly namer: TokenNamer;

  constructor(private readonly prepared: PreparedGeneration) {
    this.namer = new TokenNamer(prepared.codec, prepared.input.returnTokensAsTokenIds);
  }

  add(text: string, logprobs: readonly TokenLogprob[] | undefined): void {
    if (logprobs !== undefined && this.prepared.input.logprobs !== undefined) appendCompletionLogprobs(this.lp, logprobs, this.namer, this.text.length);
    this.text += text;
  }

  body(reason: OpenAiFinishReason, usage: Usage): object {
    const { prepared } = this;
    return {
      id: prepared.id,
      object: 'text_completion',
      created: prepared.created,
      model: prepared.input.model,
      choices: [{ index: 0, text: this.text, logprobs: prepared.input.logprobs !== undefined ? this.lp : null, finish_reason: reason }],
      usage: usageBody(usage),
    };
  }
}

/** The chat writers under their names from before the completion writers were split off. */
export { ChatChunkWriter as ChunkWriter, ChatUnaryCollector as UnaryCollector };
