/**
 * What the frontend needs from a model's tokenizer and chat template, as one narrow interface.
 * frontend/preprocess/ implements the real thing (Hugging Face tokenizer.json, jinja chat
 * template, incremental detokenizer); tests use small fakes. Codecs are loaded once per model
 * and shared by every request for it.
 */
import type { ModelCard } from '../proto/wire.js';

export interface ChatMessage {
  role: string;
  content: string;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  /** An earlier assistant turn's reasoning (reasoning parsers return it); templates like Qwen3's render it. */
  reasoning_content?: string;
}

export interface ChatRenderOptions {
  addGenerationPrompt: boolean;
  tools?: unknown[];
  /** Extra template variables (OpenAI-compatible `chat_template_kwargs`). */
  extra?: Record<string, unknown>;
}

export interface DetokenizerStep {
  /** Text safe to emit now: whole UTF-8 characters, trimmed before a matched stop string. */
  text: string;
  /** A stop string matched; nothing after it is ever emitted. */
  stopped: boolean;
  /** Which one, when the detokenizer knows. */
  stopString?: string;
}

/** Per-request incremental detokenizer. */
export interface TextDetokenizer {
  /** The step may be reused by the next push: read it before pushing again. */
  push(tokenIds: readonly number[]): DetokenizerStep;
  /** End of stream: release held-back text (nothing is held after a stop). */
  flush(): string;
}

/** A prompt to tokenize: a plain string (/v1/completions) or a conversation (chat). */
export type PromptInput =
  | { kind: 'text'; text: string; addSpecialTokens: boolean }
  | { kind: 'chat'; messages: ChatMessage[]; options: ChatRenderOptions };

export interface TokenizeOptions {
  /** The most tokens the prompt may have (context length minus the completion's share). */
  maxPromptTokens: number;
  /** The request's signal: a prompt still waiting for a preprocessing thread is dropped. */
  signal?: AbortSignal;
}

/**
 * Token ids, or `too_long` when a cheap bound already proves the prompt has at least
 * `minTokens` > maxPromptTokens tokens (it was never encoded). A codec may always answer
 * 'tokens' and leave the exact check to the caller.
 */
export type TokenizedPrompt = { type: 'tokens'; ids: ArrayLike<number> } | { type: 'too_long'; minTokens: number };

export interface ModelCodec {
  /** One past the largest valid token id, when known: token-id prompts are checked against it. */
  readonly vocabSize?: number;
  /** The chat template's source text, when the model has one: tool-call formats are detected from it. */
  readonly chatTemplate?: string;
  /**
   * Render (chat) and encode a prompt. The one preprocessing path: large prompts must not be
   * tokenized on the event loop (the default codec uses a thread pool). Chat template problems
   * reject with an error whose code is invalid_argument (or a plain Error).
   */
  tokenize(prompt: PromptInput, options: TokenizeOptions): Promise<TokenizedPrompt>;
  /** The text of one token, for logprob entries. */
  tokenText(tokenId: number): string;
  createDetokenizer(options: { stop: readonly string[]; promptTokenIds?: readonly number[] }): TextDetokenizer;
}

/** Render and encode that are cheap and synchronous: test doubles and benches. */
export interface SyncPromptCodec {
  renderChat(messages: ChatMessage[], options: ChatRenderOptions): string;
  encode(text: string, options: { addSpecialTokens: boolean }): number[];
}

/** ModelCodec.tokenize for a SyncPromptCodec: inline, no bound (the caller checks exactly). */
export async function tokenizeSync(codec: SyncPromptCodec, prompt: PromptInput): Promise<TokenizedPrompt> {
  if (prompt.kind === 'text') return { type: 'tokens', ids: codec.encode(prompt.text, { addSpecialTokens: prompt.addSpecialTokens }) };
  // The template already holds BOS and role markers; adding special tokens again doubles BOS.
  return { type: 'tokens', ids: codec.encode(codec.renderChat(prompt.messages, prompt.options), { addSpecialTokens: false }) };
}

export type CodecLoader = (card: ModelCard) => Promise<ModelCodec>;

/** Loads each model's codec once; a failed load is retried by the next request. */
export class CodecCache {
  private readonly codecs = new Map<string, Promise<ModelCodec>>();

  constructor(private readonly loader: CodecLoader) {}

  get(card: ModelCard): Promise<ModelCodec> {
    const key = `${card.name}\u0000${card.tokenizerSource}\u0000${card.chatTemplateSource}`;
    let codec = this.codecs.get(key);
    if (!codec) {
      codec = this.loader(card);
      this.codecs.set(key, codec);
      codec.catch(() => this.codecs.delete(key));
    }
    return codec;
  }
}
