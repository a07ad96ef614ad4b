/**
 * Reads tool calls back out of a model's text, in the framing of grammar/tool-calls/formats.ts
 * (the table the forcing grammar reads too), streamed or whole. One file per format:
 * hermes.ts, llama3-json.ts, mistral.ts, on parser-base.ts and call-reader.ts.
 *
 * One state machine per format serves both: `parseToolCalls` is the stream parser fed the whole
 * text at once, so a streamed response and a unary one agree wherever the chunks break.
 *
 * A call streams as OpenAI streams it: a first delta with id and name (and empty arguments)
 * once the name is complete and the arguments object has begun, then argument text as it is
 * generated, compact (whitespace outside strings dropped). Output cut inside a call therefore
 * ends with a partial call, never with its markup in the content. An object in another shape is
 * read whole when it closes; text that looked like a call but is not one (malformed JSON, no
 * name) stays content. Content is the text outside calls, trimmed.
 */
import type { ToolCallFormatName } from '../../proto/wire.js';
import { HERMES_START, HermesParser } from './hermes.js';
import { LLAMA_PYTHON_TAG, Llama3JsonParser } from './llama3-json.js';
import { MISTRAL_MARKER, MistralParser } from './mistral.js';
import { type ParsedToolCall, type ToolCallParserOptions, type ToolCallStreamParser, newToolCallId } from './parser-base.js';

export { LLAMA_PYTHON_TAG, newToolCallId };
export type { ParsedToolCall, ToolCallDelta, ToolCallParserOptions, ToolCallStreamParser } from './parser-base.js';

/** The text that starts a call (or a list of calls) in each format; none for Llama's bare JSON. */
export function toolCallMarker(format: ToolCallFormatName): string | undefined {
  return format === 'hermes' ? HERMES_START : format === 'mistral' ? MISTRAL_MARKER : undefined;
}

/** `options` may be just the id source (the older signature). */
export function createToolCallStreamParser(format: ToolCallFormatName, options: ToolCallParserOptions | (() => string) = {}): ToolCallStreamParser {
  const opts = typeof options === 'function' ? { newId: options } : options;
  switch (format) {
    case 'hermes':
      return new HermesParser(opts);
    case 'mistral':
      return new MistralParser(opts);
    case 'llama3_json':
      return new Llama3JsonParser(opts);
    default:
      throw new Error(`unknown tool-call format "${String(format)}"`);
  }
}

/** Unary: whole text in. Content = text outside calls (trimmed); calls in order. Malformed call text stays content. */
export function parseToolCalls(format: ToolCallFormatName, text: string, options: ToolCallParserOptions | (() => string) = {}): { content: string; toolCalls: ParsedToolCall[] } {
  const parser = createToolCallStreamParser(format, options);
  const first = parser.push(text);
  const last = parser.finish();
  const toolCalls: ParsedToolCall[] = [];
  for (const delta of [...first.toolCalls, ...last.toolCalls]) {
    if (delta.id !== undefined) toolCalls[delta.index] = { id: delta.id, name: delta.name ?? '', arguments: delta.arguments ?? '' };
    else toolCalls[delta.index]!.arguments += delta.arguments ?? '';
  }
  return { content: first.content + last.content, toolCalls };
}
