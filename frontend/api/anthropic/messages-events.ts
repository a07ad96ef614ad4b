/**
 * The Messages API's output vocabulary in one table, read by both the stream encoder and the
 * unary body (as grammar/tool-calls/formats.ts is read by both the forcing grammar and the
 * parsers): for each kind of block the sequencer (../content-blocks.ts) makes, its Anthropic
 * content block — start shape, delta type and field, whole shape; the stop reasons; the error
 * types by code; and the request fields chat validation names by their Messages names.
 */
import type { ApiErrorCode } from '../../errors.js';
import type { ChatFinishReason } from '../../openai/chat-output.js';
import type { Block, BlockKind } from '../content-blocks.js';
import type { ParamNames } from '../param-names.js';

export interface BlockSpec {
  /** The `content_block` of `content_block_start`. */
  start(block: Block): Record<string, unknown>;
  /** `content_block_delta`'s `delta.type`. */
  delta: string;
  /** The field of that delta that carries the text. */
  field: string;
  /** The block whole, as the unary message's `content` holds it. */
  whole(block: Block): Record<string, unknown>;
}

/** A tool call's argument text as the `input` object (a cut-off call's prefix becomes {}). */
export function toolInput(args: string): unknown {
  try {
    const value: unknown = JSON.parse(args);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

export const BLOCKS: Readonly<Record<BlockKind, BlockSpec>> = {
  text: { start: () => ({ type: 'text', text: '' }), delta: 'text_delta', field: 'text', whole: (b) => ({ type: 'text', text: b.text }) },
  reasoning: {
    start: () => ({ type: 'thinking', thinking: '', signature: '' }),
    delta: 'thinking_delta',
    field: 'thinking',
    whole: (b) => ({ type: 'thinking', thinking: b.text, signature: '' }),
  },
  tool_call: {
    start: (b) => ({ type: 'tool_use', id: b.call?.id, name: b.call?.name, input: {} }),
    delta: 'input_json_delta',
    field: 'partial_json',
    whole: (b) => ({ type: 'tool_use', id: b.call?.id, name: b.call?.name, input: toolInput(b.text) }),
  },
};

/**
 * Chat request fields → the Messages fields they came from (messages-request.ts translates one
 * into the other), so a 400 from chat validation or the pipeline names what the client sent.
 */
export const MESSAGES_PARAMS: ParamNames = {
  stop: 'stop_sequences',
  max_completion_tokens: 'max_tokens',
  // Anthropic tools are flat: `tools[i].input_schema`, `tools[i].name`.
  tools: (rest) => `tools${rest.replace(/^(\[\d+\])\.function\.parameters/, '$1.input_schema').replace(/^(\[\d+\])\.function\./, '$1.')}`,
  parallel_tool_calls: () => 'tool_choice.disable_parallel_tool_use',
};

/** `stop_reason` when one of the request's `stop_sequences` ended the output. */
export const STOP_SEQUENCE = 'stop_sequence';

/** The pipeline's (and chat's) finish reason → `stop_reason`. */
export const STOP_REASONS: Readonly<Record<ChatFinishReason, string>> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' };

/** Anthropic's `error.type` for each of our codes (its HTTP status stays the one STATUS_TABLE gives). */
export const ERROR_TYPES: Readonly<Record<ApiErrorCode, string>> = {
  invalid_argument: 'invalid_request_error',
  invalid_json: 'invalid_request_error',
  context_length_exceeded: 'invalid_request_error',
  model_not_found: 'not_found_error',
  not_found: 'not_found_error',
  instance_not_found: 'not_found_error',
  route_not_found: 'not_found_error',
  invalid_api_key: 'authentication_error',
  method_not_allowed: 'invalid_request_error',
  unsupported_media_type: 'invalid_request_error',
  body_too_large: 'request_too_large',
  resource_exhausted: 'rate_limit_error',
  overloaded: 'overloaded_error',
  no_instances: 'overloaded_error',
  unavailable: 'overloaded_error',
  lease_lost: 'overloaded_error',
  deadline_exceeded: 'timeout_error',
  cancelled: 'api_error',
  handler_error: 'api_error',
  internal: 'api_error',
  config_invalid: 'api_error',
};
