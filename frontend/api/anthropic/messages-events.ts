/**
 * The Messages API's output vocabulary in one table, read by both the stream encoder and the
 * unary body (as grammar/tool-calls/formats.ts is read by both the forcing grammar and the
 * parsers): each content block kind's start shape, its delta type and the delta's field; the
 * stop reasons; and the error types by code.
 */
import type { ApiErrorCode } from '../../errors.js';
import type { ChatFinishReason } from '../../openai/chat-output.js';

export type BlockKind = 'text' | 'thinking' | 'tool_use';

export interface BlockSpec {
  /** The `content_block` of `content_block_start` (tool_use adds id and name). */
  start: Readonly<Record<string, unknown>>;
  /** `content_block_delta`'s `delta.type`. */
  delta: string;
  /** The field of that delta that carries the text. */
  field: string;
}

export const BLOCKS: Readonly<Record<BlockKind, BlockSpec>> = {
  text: { start: { type: 'text', text: '' }, delta: 'text_delta', field: 'text' },
  thinking: { start: { type: 'thinking', thinking: '', signature: '' }, delta: 'thinking_delta', field: 'thinking' },
  tool_use: { start: { type: 'tool_use', input: {} }, delta: 'input_json_delta', field: 'partial_json' },
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
