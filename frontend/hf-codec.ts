/**
 * The default CodecLoader: adapts frontend/preprocess (Hugging Face tokenizer, jinja chat
 * template, incremental detokenizer) to the frontend's ModelCodec interface. A model without a
 * chat template still serves /v1/completions; chat requests to it get a 400.
 *
 * Prompts go through preprocess/prompt.ts's tokenizePrompt: inline when small (a thread
 * round-trip costs more than tokenizing a short chat turn), on the PreprocessPool otherwise,
 * so no prompt ties up the event loop for more than about half a millisecond.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import type { ModelCard } from '../proto/wire.js';
import {
  IncrementalDetokenizer,
  loadPromptModel,
  minTokensForBytes,
  tokenizePrompt,
  type PreprocessPool,
  type PromptModel,
  type PromptSource,
  type PromptSpec,
} from './preprocess/index.js';
import type { CodecLoader, DetokenizerStep, ModelCodec, PromptInput, TextDetokenizer, TokenizedPrompt, TokenizeOptions } from './codec.js';

/**
 * Prompts up to this many characters (content, tools and template variables together) are
 * tokenized inline. bench/preprocess-bench.ts on the 2-core dev box: 1024 chars take 0.40 ms
 * inline and 0.45 ms through a thread (the round trip costs ~0.05 ms), so inline is cheaper
 * and still holds the event loop for under half a millisecond; past that the pool takes it.
 */
export const DEFAULT_INLINE_MAX_CHARS = 1024;

export interface HfCodecOptions {
  /** Where prompts above `inlineMaxChars` are tokenized. Absent: everything inline (tools, tests). */
  pool?: PreprocessPool;
  inlineMaxChars?: number;
}

export function createHfCodecLoader(options: HfCodecOptions = {}): CodecLoader {
  return async (card: ModelCard) => {
    const source: PromptSource = {
      tokenizerDir: card.tokenizerSource || card.modelPath,
      templateDir: card.chatTemplateSource || card.modelPath,
    };
    return new HfCodec(await loadPromptModel(source), source, options);
  };
}

/** Inline-only loader, for tools that tokenize a few short prompts. The frontend uses a pool. */
export const hfCodecLoader: CodecLoader = createHfCodecLoader();

export class HfCodec implements ModelCodec {
  readonly vocabSize: number;
  readonly chatTemplate: string | undefined;
  private readonly pool: PreprocessPool | undefined;
  private readonly inlineMaxChars: number;

  constructor(
    private readonly model: PromptModel,
    private readonly source: PromptSource,
    options: HfCodecOptions = {},
  ) {
    this.vocabSize = model.tokenizer.vocabSize;
    this.chatTemplate = model.template?.source;
    this.pool = options.pool;
    this.inlineMaxChars = options.inlineMaxChars ?? DEFAULT_INLINE_MAX_CHARS;
  }

  async tokenize(prompt: PromptInput, options: TokenizeOptions): Promise<TokenizedPrompt> {
    const spec = toSpec(prompt);
    const budget = options.maxPromptTokens;
    if (spec.kind === 'text') {
      // Free early refusal before anything is copied: UTF-16 length <= UTF-8 bytes.
      const perToken = this.model.tokenizer.bytesPerToken;
      const quick = perToken === undefined ? 0 : minTokensForBytes(spec.text.length, perToken);
      if (quick > budget) return { type: 'too_long', minTokens: quick };
    }
    if (!this.pool || approxChars(spec, this.inlineMaxChars) <= this.inlineMaxChars) return tokenizePrompt(this.model, spec, budget);
    // A large prompt's body was just read and parsed in this same task (tens of ms for 10 MB);
    // let /live and other requests in before paying the copy to the thread as well.
    await yieldToLoop();
    return this.pool.run(this.source, spec, budget, options.signal);
  }

  tokenText(tokenId: number): string {
    return this.model.tokenizer.decode([tokenId], { skipSpecialTokens: false });
  }

  createDetokenizer(options: { stop: readonly string[]; promptTokenIds?: readonly number[] }): TextDetokenizer {
    // Stop token ids are cut by the pipeline before tokens reach the detokenizer.
    const inner = new IncrementalDetokenizer(this.model.tokenizer, {
      stop: options.stop,
      ...(options.promptTokenIds ? { promptTokenIds: options.promptTokenIds } : {}),
    });
    // One step object per request, refilled on every push: the pipeline reads it at once.
    const step: DetokenizerStep = { text: '', stopped: false };
    return {
      push(tokenIds) {
        step.text = inner.pushMany(tokenIds);
        step.stopped = inner.isFinished;
        if (step.stopped && typeof inner.stopReason === 'string') step.stopString = inner.stopReason;
        return step;
      },
      flush: () => inner.flush(),
    };
  }
}

function toSpec(prompt: PromptInput): PromptSpec {
  if (prompt.kind === 'text') return { kind: 'text', text: prompt.text, addSpecialTokens: prompt.addSpecialTokens };
  return {
    kind: 'chat',
    messages: prompt.messages,
    addGenerationPrompt: prompt.options.addGenerationPrompt,
    ...(prompt.options.tools ? { tools: prompt.options.tools } : {}),
    ...(prompt.options.extra ? { variables: prompt.options.extra } : {}),
  };
}

/**
 * Characters in a JSON-like value, counting stops once past `limit`: the walk costs at most
 * about `limit` steps however large the value, so deciding inline-or-pool stays cheap.
 */
export function approxChars(value: unknown, limit: number): number {
  let total = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && total <= limit) {
    const v = stack.pop();
    if (typeof v === 'string') total += v.length;
    else if (Array.isArray(v)) {
      total += 1;
      for (let i = 0; i < v.length && stack.length <= limit; i++) stack.push(v[i]);
    } else if (typeof v === 'object' && v !== null) {
      total += 1;
      for (const key in v) {
        total += key.length;
        stack.push((v as Record<string, unknown>)[key]);
        if (stack.length > limit) break;
      }
    } else total += 1;
  }
  return stack.length > 0 ? Math.max(total, limit + 1) : total;
}
