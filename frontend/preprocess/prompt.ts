/**
 * One prompt → token ids, the single preprocessing path: render the chat template (chat), check
 * the byte bound against the caller's token budget, then encode. The same function runs inline
 * on the event loop for small prompts and inside the preprocessing pool's threads for the rest
 * (pool.ts), so both give identical ids and identical errors.
 */
import { ChatTemplate, type ChatMessage } from './chat-template.js';
import { minTokensForBytes } from './token-bound.js';
import { loadTokenizer, type HfTokenizer } from './tokenizer.js';

/** What to tokenize. Plain data: it crosses to pool threads by structured clone. */
export type PromptSpec =
  | { kind: 'text'; text: string; addSpecialTokens: boolean }
  | {
      kind: 'chat';
      messages: ChatMessage[];
      addGenerationPrompt: boolean;
      tools?: unknown[];
      /** Extra template variables (chat_template_kwargs). */
      variables?: Record<string, unknown>;
    };

/**
 * Token ids, or proof that the prompt cannot fit: `minTokens` is a lower bound on its token
 * count that already exceeds the budget (the prompt was not encoded).
 */
export type PromptTokens = { type: 'tokens'; ids: Uint32Array } | { type: 'too_long'; minTokens: number };

/** A model's tokenizer and template, as loaded from its directories. */
export interface PromptModel {
  tokenizer: HfTokenizer;
  template: ChatTemplate | undefined;
  /** Why there is no template (thrown at chat requests); the model still serves plain prompts. */
  templateError: unknown;
}

export interface PromptSource {
  /** Directory with tokenizer.json (and tokenizer_config.json). */
  tokenizerDir: string;
  /** Directory with the chat template (tokenizer_config.json or chat_template.jinja). */
  templateDir: string;
}

export async function loadPromptModel(source: PromptSource): Promise<PromptModel> {
  const tokenizer = await loadTokenizer(source.tokenizerDir);
  let template: ChatTemplate | undefined;
  let templateError: unknown;
  try {
    template = await ChatTemplate.load(source.templateDir);
  } catch (err) {
    templateError = err;
  }
  return { tokenizer, template, templateError };
}

/**
 * Render and encode `spec`. `maxPromptTokens` is the most tokens the prompt may have; when the
 * byte bound proves it has more, the answer is 'too_long' and nothing is encoded. Template
 * problems throw ChatTemplateError / ChatTemplateMissingError (invalid_argument).
 */
export function tokenizePrompt(model: PromptModel, spec: PromptSpec, maxPromptTokens: number): PromptTokens {
  let text: string;
  let addSpecialTokens: boolean;
  if (spec.kind === 'text') {
    text = spec.text;
    addSpecialTokens = spec.addSpecialTokens;
  } else {
    if (!model.template) throw model.templateError;
    text = model.template.render(spec.messages, {
      addGenerationPrompt: spec.addGenerationPrompt,
      ...(spec.tools ? { tools: spec.tools } : {}),
      ...(spec.variables ? { variables: spec.variables } : {}),
    });
    // The template already holds BOS and role markers; adding special tokens again doubles BOS.
    addSpecialTokens = false;
  }
  const minTokens = minPromptTokens(model.tokenizer, text, maxPromptTokens);
  if (minTokens > maxPromptTokens) return { type: 'too_long', minTokens };
  return { type: 'tokens', ids: Uint32Array.from(model.tokenizer.encode(text, { addSpecialTokens })) };
}

/**
 * Lower bound on the tokens of `text` (0 when the tokenizer has no safe bound). A UTF-16 length
 * never exceeds the UTF-8 byte length, so `text.length` is a free first bound; the exact byte
 * count is taken only when that one does not already decide.
 */
export function minPromptTokens(tokenizer: HfTokenizer, text: string, maxPromptTokens = Infinity): number {
  const perToken = tokenizer.bytesPerToken;
  if (perToken === undefined) return 0;
  const quick = minTokensForBytes(text.length, perToken);
  if (quick > maxPromptTokens) return quick;
  return minTokensForBytes(Buffer.byteLength(text, 'utf8'), perToken);
}
