/**
 * Codec 4 (after chat, completions and Responses): Anthropic's Messages API, `POST /v1/messages`.
 * The request becomes a chat request (messages-request.ts); the output goes through the same
 * ChatOutputParser chat uses (reasoning split, tool-call parsing), and its parts become content
 * blocks: `thinking`, `text`, `tool_use`, in the order the model produced them. Block shapes,
 * stop reasons and error types come from messages-events.ts.
 *
 * Stream: message_start, ping, then per block content_block_start / content_block_delta* /
 * content_block_stop, then message_delta (stop_reason, usage), message_stop.
 */
import { randomBytes } from 'node:crypto';
import { errorBody, type ApiError } from '../../errors.js';
import { chatOutputParser, type ChatOutputParser, type ChatOutputStep } from '../../openai/chat-output.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../../pipeline/generation.js';
import { eventFrame, type ApiCodec, type FrameSink, type StreamEncoder, type UnaryEncoder } from '../codec.js';
import { BLOCKS, ERROR_TYPES, STOP_REASONS, STOP_SEQUENCE, type BlockKind } from './messages-events.js';
import { parseMessagesRequest } from './messages-request.js';

/** Anthropic's tool-use ids look like `toolu_01…`; clients echo them back in tool_result. */
export const newToolUseId = (): string => `toolu_${randomBytes(12).toString('hex')}`;

interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

function usageBody(usage: Usage): MessagesUsage {
  return { input_tokens: usage.promptTokens, output_tokens: usage.completionTokens, cache_read_input_tokens: usage.cachedTokens, cache_creation_input_tokens: 0 };
}

function messageId(prepared: PreparedGeneration): string {
  return prepared.id;
}

/** A tool call's argument text as the `input` object (a cut-off call's prefix becomes {}). */
function toolInput(args: string): unknown {
  try {
    const value: unknown = JSON.parse(args);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

function passThrough(text: string): ChatOutputStep {
  return { reasoning: '', content: text, toolCalls: [] };
}

/** `stop_reason` and `stop_sequence`: a matched stop sequence is named, unless the turn ended in tool calls. */
function stopReason(parser: ChatOutputParser | undefined, reason: OpenAiFinishReason, stopString: string | undefined): { reason: string; sequence: string | null } {
  const chat = parser ? parser.finishReason(reason) : reason;
  if (chat === 'stop' && stopString !== undefined) return { reason: STOP_SEQUENCE, sequence: stopString };
  return { reason: STOP_REASONS[chat], sequence: null };
}

class MessagesStream implements StreamEncoder {
  private readonly parser: ChatOutputParser | undefined;
  private index = -1;
  private open_: BlockKind | undefined;

  constructor(private readonly prepared: PreparedGeneration) {
    this.parser = chatOutputParser(prepared.input, newToolUseId);
  }

  private send(out: FrameSink, event: string, body: object): Promise<void> | undefined {
    return out.frame(eventFrame(event, JSON.stringify({ type: event, ...body })));
  }

  open(out: FrameSink): void {
    const { prepared } = this;
    const message = {
      id: messageId(prepared),
      type: 'message',
      role: 'assistant',
      model: prepared.input.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usageBody({ promptTokens: prepared.request.tokenIds.length, completionTokens: 0, cachedTokens: 0 }),
    };
    this.send(out, 'message_start', { message });
    this.send(out, 'ping', {});
  }

  private startBlock(out: FrameSink, kind: BlockKind, extra: object = {}): void {
    this.stopBlock(out);
    this.index += 1;
    this.open_ = kind;
    this.send(out, 'content_block_start', { index: this.index, content_block: { ...BLOCKS[kind].start, ...extra } });
  }

  private stopBlock(out: FrameSink): void {
    if (this.open_ === undefined) return;
    this.send(out, 'content_block_stop', { index: this.index });
    this.open_ = undefined;
  }

  private deltaIn(out: FrameSink, kind: BlockKind, text: string): Promise<void> | undefined {
    if (this.open_ !== kind) this.startBlock(out, kind);
    const spec = BLOCKS[kind];
    // The per-token frame: built from strings so only the text goes through JSON.stringify.
    return out.frame(`event: content_block_delta\ndata: {"type":"content_block_delta","index":${this.index},"delta":{"type":"${spec.delta}","${spec.field}":${JSON.stringify(text)}}}\n\n`);
  }

  private step(out: FrameSink, step: ChatOutputStep): Promise<void> | undefined {
    let backpressure: Promise<void> | undefined;
    if (step.reasoning.length > 0) backpressure = this.deltaIn(out, 'thinking', step.reasoning);
    if (step.content.length > 0) backpressure = this.deltaIn(out, 'text', step.content);
    for (const call of step.toolCalls) {
      if (call.id !== undefined) this.startBlock(out, 'tool_use', { id: call.id, name: call.name ?? '' });
      if (call.arguments !== undefined && call.arguments.length > 0) backpressure = this.deltaIn(out, 'tool_use', call.arguments);
    }
    return backpressure;
  }

  delta(text: string, _logprobs: unknown, out: FrameSink): Promise<void> | undefined {
    return this.step(out, this.parser ? this.parser.push(text) : passThrough(text));
  }

  finish(reason: OpenAiFinishReason, usage: Usage, out: FrameSink, stopString?: string): { finishReason: string; backpressure: Promise<void> | undefined } {
    if (this.parser) this.step(out, this.parser.finish());
    this.stopBlock(out);
    const stop = stopReason(this.parser, reason, stopString);
    this.send(out, 'message_delta', { delta: { stop_reason: stop.reason, stop_sequence: stop.sequence }, usage: { output_tokens: usage.completionTokens } });
    const backpressure = this.send(out, 'message_stop', {});
    return { finishReason: stop.reason, backpressure };
  }

  done(): string {
    return '';
  }
}

class MessagesUnary implements UnaryEncoder {
  private text = '';
  constructor(private readonly prepared: PreparedGeneration) {}

  add(text: string): void {
    this.text += text;
  }

  body(reason: OpenAiFinishReason, usage: Usage, stopString?: string): { body: object; finishReason: string } {
    const parser = chatOutputParser(this.prepared.input, newToolUseId);
    const content: object[] = [];
    if (parser) {
      const out = parser.parseAll(this.text);
      if (out.reasoning !== undefined && out.reasoning.length > 0) content.push({ ...BLOCKS.thinking.start, thinking: out.reasoning });
      if (out.content.length > 0) content.push({ ...BLOCKS.text.start, text: out.content });
      for (const call of out.toolCalls) content.push({ type: 'tool_use', id: call.id, name: call.name, input: toolInput(call.arguments) });
    } else if (this.text.length > 0) {
      content.push({ ...BLOCKS.text.start, text: this.text });
    }
    const stop = stopReason(parser, reason, stopString);
    return {
      body: { id: messageId(this.prepared), type: 'message', role: 'assistant', model: this.prepared.input.model, content, stop_reason: stop.reason, stop_sequence: stop.sequence, usage: usageBody(usage) },
      finishReason: stop.reason,
    };
  }
}

/** `{type: 'error', error: {type, message}}`; the message is the one every error body gets (sanitized, capped). */
export function messagesErrorBody(err: ApiError): object {
  return { type: 'error', error: { type: ERROR_TYPES[err.code], message: errorBody(err).error.message } };
}

export const messagesCodec: ApiCodec = {
  endpoint: 'messages',
  idPrefix: 'msg_',
  parse: (body) => parseMessagesRequest(body),
  streamEncoder: (prepared) => new MessagesStream(prepared),
  unaryEncoder: (prepared) => new MessagesUnary(prepared),
  errorBody: messagesErrorBody,
  streamError: (err) => eventFrame('error', JSON.stringify(messagesErrorBody(err))),
};
