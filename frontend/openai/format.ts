/**
 * OpenAI response shapes: streaming chunks and unary bodies for chat and completions, and the
 * two logprob layouts. The per-token path serializes plain-text chunks from a precomputed
 * head and tail, so only the text itself goes through JSON.stringify.
 */
import type { TokenLogprob } from '../../proto/wire.js';
import type { ModelCodec } from '../codec.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../pipeline/generation.js';

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

/** Builds the SSE chunks of one streamed response. */
export class ChunkWriter {
  private readonly head: string;
  private readonly textTail: string;
  private readonly namer: TokenNamer;
  private textOffset = 0;

  constructor(
    private readonly prepared: PreparedGeneration,
  ) {
    const chat = prepared.input.kind === 'chat';
    const usageNull = prepared.input.includeUsage ? ',"usage":null' : '';
    const object = chat ? 'chat.completion.chunk' : 'text_completion';
    this.head = `{"id":${JSON.stringify(prepared.id)},"object":"${object}","created":${prepared.created},"model":${JSON.stringify(prepared.input.model)}`;
    this.textTail = chat ? `},"logprobs":null,"finish_reason":null}]${usageNull}}` : `,"logprobs":null,"finish_reason":null}]${usageNull}}`;
    this.namer = new TokenNamer(prepared.codec, prepared.input.returnTokensAsTokenIds);
  }

  private get isChat(): boolean {
    return this.prepared.input.kind === 'chat';
  }

  private usageField(): string {
    return this.prepared.input.includeUsage ? ',"usage":null' : '';
  }

  /** Chat streams open with the assistant role; completions have no such chunk. */
  roleChunk(): string | undefined {
    if (!this.isChat) return undefined;
    return `${this.head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.usageField()}}`;
  }

  delta(text: string, logprobs: readonly TokenLogprob[] | undefined): string {
    if (logprobs === undefined || this.prepared.input.logprobs === undefined) {
      return this.isChat ? `${this.head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}${this.textTail}` : `${this.head},"choices":[{"index":0,"text":${JSON.stringify(text)}${this.textTail}`;
    }
    if (this.isChat) {
      return `${this.head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":${JSON.stringify({ content: chatLogprobs(logprobs, this.namer) })},"finish_reason":null}]${this.usageField()}}`;
    }
    const lp = emptyCompletionLogprobs();
    const start = this.textOffset;
    appendCompletionLogprobs(lp, logprobs, this.namer, start);
    this.textOffset += text.length;
    return `${this.head},"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":${JSON.stringify(lp)},"finish_reason":null}]${this.usageField()}}`;
  }

  finish(reason: OpenAiFinishReason): string {
    const choice = this.isChat ? `{"index":0,"delta":{},"logprobs":null,"finish_reason":"${reason}"}` : `{"index":0,"text":"","logprobs":null,"finish_reason":"${reason}"}`;
    return `${this.head},"choices":[${choice}]${this.usageField()}}`;
  }

  usage(usage: Usage): string {
    return `${this.head},"choices":[],"usage":${JSON.stringify(usageBody(usage))}}`;
  }
}

/** Accumulates a unary response. */
export class UnaryCollector {
  private text = '';
  private readonly chatEntries: ChatLogprobEntry[] = [];
  private readonly completionLp = emptyCompletionLogprobs();
  private readonly namer: TokenNamer;

  constructor(private readonly prepared: PreparedGeneration) {
    this.namer = new TokenNamer(prepared.codec, prepared.input.returnTokensAsTokenIds);
  }

  add(text: string, logprobs: readonly TokenLogprob[] | undefined): void {
    if (logprobs !== undefined && this.prepared.input.logprobs !== undefined) {
      if (this.prepared.input.kind === 'chat') this.chatEntries.push(...chatLogprobs(logprobs, this.namer));
      else appendCompletionLogprobs(this.completionLp, logprobs, this.namer, this.text.length);
    }
    this.text += text;
  }

  body(reason: OpenAiFinishReason, usage: Usage): object {
    const { prepared } = this;
    const wantsLogprobs = prepared.input.logprobs !== undefined;
    if (prepared.input.kind === 'chat') {
      return {
        id: prepared.id,
        object: 'chat.completion',
        created: prepared.created,
        model: prepared.input.model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: this.text },
            logprobs: wantsLogprobs ? { content: this.chatEntries } : null,
            finish_reason: reason,
          },
        ],
        usage: usageBody(usage),
      };
    }
    return {
      id: prepared.id,
      object: 'text_completion',
      created: prepared.created,
      model: prepared.input.model,
      choices: [{ index: 0, text: this.text, logprobs: wantsLogprobs ? this.completionLp : null, finish_reason: reason }],
      usage: usageBody(usage),
    };
  }
}
