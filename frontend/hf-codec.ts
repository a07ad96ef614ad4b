/**
 * The default CodecLoader: adapts frontend/preprocess (Hugging Face tokenizer, jinja chat
 * template, incremental detokenizer) to the frontend's ModelCodec interface. A model without a
 * chat template still serves /v1/completions; chat requests to it get a 400.
 */
import type { ModelCard } from '../proto/wire.js';
import { ChatTemplate, IncrementalDetokenizer, loadTokenizer, type HfTokenizer } from './preprocess/index.js';
import type { ChatMessage, ChatRenderOptions, DetokenizerStep, ModelCodec, TextDetokenizer } from './codec.js';

export async function hfCodecLoader(card: ModelCard): Promise<ModelCodec> {
  const tokenizer = await loadTokenizer(card.tokenizerSource || card.modelPath);
  let template: ChatTemplate | undefined;
  let templateError: unknown;
  try {
    template = await ChatTemplate.load(card.chatTemplateSource || card.modelPath);
  } catch (err) {
    templateError = err;
  }
  return new HfCodec(tokenizer, template, templateError);
}

export class HfCodec implements ModelCodec {
  readonly vocabSize: number;

  constructor(
    private readonly tokenizer: HfTokenizer,
    private readonly template: ChatTemplate | undefined,
    private readonly templateError: unknown,
  ) {
    this.vocabSize = tokenizer.vocabSize;
  }

  renderChat(messages: ChatMessage[], options: ChatRenderOptions): string {
    if (!this.template) throw this.templateError;
    return this.template.render(messages, {
      addGenerationPrompt: options.addGenerationPrompt,
      ...(options.tools ? { tools: options.tools } : {}),
      ...(options.extra ? { variables: options.extra } : {}),
    });
  }

  encode(text: string, options: { addSpecialTokens: boolean }): number[] {
    return this.tokenizer.encode(text, { addSpecialTokens: options.addSpecialTokens });
  }

  tokenText(tokenId: number): string {
    return this.tokenizer.decode([tokenId], { skipSpecialTokens: false });
  }

  createDetokenizer(options: { stop: readonly string[]; promptTokenIds?: readonly number[] }): TextDetokenizer {
    // Stop token ids are cut by the pipeline before tokens reach the detokenizer.
    const inner = new IncrementalDetokenizer(this.tokenizer, {
      stop: options.stop,
      ...(options.promptTokenIds ? { promptTokenIds: options.promptTokenIds } : {}),
    });
    // One step object per request, refilled on every push: the pipeline reads it at once.
    const step: DetokenizerStep = { text: '', stopped: false };
    return {
      push(tokenIds) {
        step.text = inner.pushMany(tokenIds);
        step.stopped = inner.isFinished;
        return step;
      },
      flush: () => inner.flush(),
    };
  }
}
