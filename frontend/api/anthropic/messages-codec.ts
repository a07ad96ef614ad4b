/**
 * Codec 4 (after chat, completions and Responses): Anthropic's Messages API, `POST /v1/messages`.
 * The request becomes a chat request (messages-request.ts); the output goes through the one
 * content-block sequencer (../content-blocks.ts, over the ChatOutputParser chat uses), whose
 * blocks become `thinking`, `text` and `tool_use`, in the order the model produced them, streamed
 * and unary alike. Block shapes, stop reasons, error types and the request fields' names come
 * from messages-events.ts.
 *
 * Stream: message_start, ping, then per block content_block_start / content_block_delta* /
 * content_block_stop, then message_delta (stop_reason, usage), message_stop.
 */
import { randomBytes } from 'node:crypto';
import type { TokenLogprob } from '../../../proto/wire.js';
import { errorBody, type ApiError } from '../../errors.js';
import type { ChatFinishReason } from '../../openai/chat-output.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../../pipeline/generation.js';
import { eventFrame, type ApiCodec, type FrameSink, type StreamEncoder, type UnaryEncoder } from '../codec.js';
import { BlockSequencer, type Block, type BlockHooks } from '../content-blocks.js';
import { BLOCKS, ERROR_TYPES, MESSAGES_PARAMS, STOP_REASONS, STOP_SEQUENCE } from './messages-events.js';
import { parseMessagesRequest } from './messages-request.js';

/** Anthropic's tool-use ids look like `toolu_01…`; clients echo them back in tool_result. */
export const newToolUseId = (): string => `toolu_${randomBytes(12).toString('hex')}`;

interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

/**
 * Anthropic's usage: the prompt is input_tokens + cache_read_input_tokens +
 * cache_creation_input_tokens, so `input_tokens` counts only the tokens the prefix cache did not
 * serve. (Tandem writes the cache as a side effect and reports no creation.)
 */
function usageBody(usage: Usage): MessagesUsage {
  return { input_tokens: usage.promptTokens - usage.cachedTokens, output_tokens: usage.completionTokens, cache_read_input_tokens: usage.cachedTokens, cache_creation_input_tokens: 0 };
}

function messageId(prepared: PreparedGeneration): string {
  return prepared.id;
}

/** `stop_reason` and `stop_sequence`: a matched stop sequence is named, unless the turn ended in tool calls. */
function stopReason(reason: ChatFinishReason, stopString: string | undefined): { reason: string; sequence: string | null } {
  if (reason === 'stop' && stopString !== undefined) return { reason: STOP_SEQUENCE, sequence: stopString };
  return { reason: STOP_REASONS[reason], sequence: null };
}

const send = (out: FrameSink, event: string, body: object): Promise<void> | undefined => out.frame(eventFrame(event, JSON.stringify({ type: event, ...body })));

/** The stream's hooks: content_block_start / content_block_delta / content_block_stop. */
const STREAM_BLOCKS: BlockHooks<FrameSink> = {
  // The frames carry each delta; nothing needs a block's whole text.
  keepsText: false,
  open: (block, out) => void send(out, 'content_block_start', { index: block.index, content_block: BLOCKS[block.kind].start(block) }),
  delta(block, text, _logprobs, out) {
    const spec = BLOCKS[block.kind];
    // The per-token frame: built from strings so only the text goes through JSON.stringify.
    return out.frame(`event: content_block_delta\ndata: {"type":"content_block_delta","index":${block.index},"delta":{"type":"${spec.delta}","${spec.field}":${JSON.stringify(text)}}}\n\n`);
  },
  close: (block, out) => void send(out, 'content_block_stop', { index: block.index }),
};

class MessagesStream implements StreamEncoder {
  private readonly blocks: BlockSequencer<FrameSink>;

  constructor(private readonly prepared: PreparedGeneration) {
    this.blocks = new BlockSequencer(prepared, STREAM_BLOCKS, newToolUseId);
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
      // The prefix cache hit is known at the end: message_delta carries the final counts.
      usage: usageBody({ promptTokens: prepared.request.tokenIds.length, completionTokens: 0, cachedTokens: 0 }),
    };
    send(out, 'message_start', { message });
    send(out, 'ping', {});
  }

  delta(text: string, logprobs: readonly TokenLogprob[] | undefined, out: FrameSink, tokens = 0): Promise<void> | undefined {
    return this.blocks.push(text, tokens, logprobs, out);
  }

  finish(reason: OpenAiFinishReason, usage: Usage, out: FrameSink, stopString?: string): { finishReason: string; backpressure: Promise<void> | undefined } {
    const end = this.blocks.finish(reason, out);
    const stop = stopReason(end.finishReason, stopString);
    // message_delta's usage counters are the message's totals (the SDKs overwrite message_start's with them).
    send(out, 'message_delta', { delta: { stop_reason: stop.reason, stop_sequence: stop.sequence }, usage: usageBody(usage) });
    const backpressure = send(out, 'message_stop', {});
    return { finishReason: stop.reason, backpressure };
  }

  done(): string {
    return '';
  }
}

/** The unary hooks: each block, whole, into the message's content. */
function collect(content: object[]): BlockHooks<void> {
  return { keepsText: true, open: () => undefined, delta: () => undefined, close: (block: Block) => void content.push(BLOCKS[block.kind].whole(block)) };
}

class MessagesUnary implements UnaryEncoder {
  private readonly content: object[] = [];
  private readonly blocks: BlockSequencer<void>;

  constructor(private readonly prepared: PreparedGeneration) {
    this.blocks = new BlockSequencer(prepared, collect(this.content), newToolUseId);
  }

  add(text: string, logprobs: readonly TokenLogprob[] | undefined, tokens = 0): void {
    this.blocks.push(text, tokens, logprobs, undefined);
  }

  body(reason: OpenAiFinishReason, usage: Usage, stopString?: string): { body: object; finishReason: string } {
    const stop = stopReason(this.blocks.finish(reason, undefined).finishReason, stopString);
    return {
      body: { id: messageId(this.prepared), type: 'message', role: 'assistant', model: this.prepared.input.model, content: this.content, stop_reason: stop.reason, stop_sequence: stop.sequence, usage: usageBody(usage) },
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
  paramNames: MESSAGES_PARAMS,
};
