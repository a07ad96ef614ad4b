/**
 * Chat template rendering with @huggingface/jinja, from the model's own template: the
 * `chat_template` of tokenizer_config.json (a string, or a list of named templates), or a
 * `chat_template.jinja` file beside it (the layout newer transformers versions save).
 * The template is parsed once; render() only evaluates it.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { ChatTemplateError, ChatTemplateMissingError } from './errors.js';
import { readJsonFile, specialTokenString as tokenString } from './tokenizer.js';

export interface ChatContentPart {
  type: string;
  text?: string;
}

export interface ChatMessage {
  role: string;
  content?: string | ChatContentPart[] | null;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  reasoning_content?: string;
}

export interface RenderOptions {
  /** Open an assistant turn at the end. Default true. */
  addGenerationPrompt?: boolean;
  /** OpenAI-style tool definitions, passed as `tools`. */
  tools?: unknown[];
  /** Extra template variables (vLLM's chat_template_kwargs, e.g. enable_thinking). */
  variables?: Record<string, unknown>;
}

export class ChatTemplate {
  private readonly template: Template;

  /**
   * @param source the Jinja text
   * @param specialTokens bos_token / eos_token values the template may reference
   */
  constructor(
    readonly source: string,
    private readonly specialTokens: { bosToken?: string; eosToken?: string } = {},
  ) {
    try {
      this.template = new Template(source);
    } catch (cause) {
      throw new ChatTemplateError(`chat template does not parse: ${(cause as Error).message}`, { cause });
    }
  }

  /** The template from a parsed tokenizer_config.json; `origin` names the model in errors. */
  static fromTokenizerConfig(config: Record<string, unknown>, origin = 'tokenizer_config.json'): ChatTemplate {
    const source = pickTemplate(config.chat_template);
    if (source === undefined) throw new ChatTemplateMissingError(origin);
    return new ChatTemplate(source, { bosToken: tokenString(config.bos_token), eosToken: tokenString(config.eos_token) });
  }

  /** Load from a model directory; throws ChatTemplateMissingError when it has none. */
  static async load(modelDir: string): Promise<ChatTemplate> {
    const config = (await readJsonFile(join(modelDir, 'tokenizer_config.json'), false)) ?? {};
    let source = pickTemplate(config.chat_template);
    if (source === undefined) {
      try {
        source = await readFile(join(modelDir, 'chat_template.jinja'), 'utf8');
      } catch {
        throw new ChatTemplateMissingError(modelDir);
      }
    }
    return new ChatTemplate(source, { bosToken: tokenString(config.bos_token), eosToken: tokenString(config.eos_token) });
  }

  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    if (messages.length === 0) throw new ChatTemplateError('messages must not be empty');
    const context: Record<string, unknown> = {
      ...options.variables,
      messages: messages.map(flattenContent),
      add_generation_prompt: options.addGenerationPrompt ?? true,
      bos_token: this.specialTokens.bosToken ?? '',
      eos_token: this.specialTokens.eosToken ?? '',
    };
    if (options.tools !== undefined && options.tools.length > 0) context.tools = options.tools;
    try {
      return this.template.render(context);
    } catch (cause) {
      throw new ChatTemplateError(`chat template rejected the conversation: ${(cause as Error).message}`, { cause });
    }
  }
}

/**
 * Templates expect string content; OpenAI allows a list of parts. Text parts are joined with
 * newlines (as vLLM does for string-format templates); other part types are not supported.
 */
function flattenContent(message: ChatMessage): Record<string, unknown> {
  const { content } = message;
  if (!Array.isArray(content)) return { ...message, content: content ?? '' };
  const texts: string[] = [];
  for (const part of content) {
    if (part.type !== 'text' || typeof part.text !== 'string') {
      throw new ChatTemplateError(`unsupported content part type '${String(part.type)}'`);
    }
    texts.push(part.text);
  }
  return { ...message, content: texts.join('\n') };
}

function pickTemplate(raw: unknown): string | undefined {
  if (typeof raw === 'string' && raw.length > 0) return raw;
  if (Array.isArray(raw)) {
    const named = raw as Array<{ name?: unknown; template?: unknown }>;
    const chosen = named.find((t) => t.name === 'default') ?? named[0];
    if (chosen && typeof chosen.template === 'string') return chosen.template;
  }
  return undefined;
}
