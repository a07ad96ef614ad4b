/**
 * The Responses API's output vocabulary in one table, read by the stream encoder, the unary body
 * and the stored response alike (as grammar/tool-calls/formats.ts is read by both the forcing
 * grammar and the parsers): each output item kind's id prefix, its shape when it opens, its
 * content part, and its delta and done events.
 */
import type { ApiErrorCode } from '../../errors.js';
import { STATUS_TABLE } from '../../errors.js';

export type ItemKind = 'reasoning' | 'message' | 'function_call';

export interface ItemSpec {
  /** The item id's prefix. */
  idPrefix: string;
  /** The item as `response.output_item.added` carries it. */
  opened(id: string, extra: Record<string, unknown>): Record<string, unknown>;
  /** The item whole, from its text (or, for a call, its arguments). */
  closed(id: string, text: string, extra: Record<string, unknown>): Record<string, unknown>;
  /** Text-bearing items open a content part; calls have none. */
  part?: Readonly<Record<string, unknown>>;
  /** The part's text field. */
  field: string;
  delta: string;
  done: string;
}

const outputText = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });

export const ITEMS: Readonly<Record<ItemKind, ItemSpec>> = {
  reasoning: {
    idPrefix: 'rs_',
    opened: (id) => ({ type: 'reasoning', id, summary: [], content: [] }),
    closed: (id, text) => ({ type: 'reasoning', id, summary: [], content: [{ type: 'reasoning_text', text }] }),
    part: { type: 'reasoning_text', text: '' },
    field: 'text',
    delta: 'response.reasoning_text.delta',
    done: 'response.reasoning_text.done',
  },
  message: {
    idPrefix: 'msg_',
    opened: (id) => ({ type: 'message', id, status: 'in_progress', role: 'assistant', content: [] }),
    closed: (id, text) => ({ type: 'message', id, status: 'completed', role: 'assistant', content: [outputText(text)] }),
    part: outputText(''),
    field: 'text',
    delta: 'response.output_text.delta',
    done: 'response.output_text.done',
  },
  function_call: {
    idPrefix: 'fc_',
    opened: (id, extra) => ({ type: 'function_call', id, call_id: extra.call_id, name: extra.name, arguments: '', status: 'in_progress' }),
    closed: (id, text, extra) => ({ type: 'function_call', id, call_id: extra.call_id, name: extra.name, arguments: text, status: 'completed' }),
    field: 'arguments',
    delta: 'response.function_call_arguments.delta',
    done: 'response.function_call_arguments.done',
  },
};

/** The response's end by the pipeline's finish: its status, its terminal event, and why it is incomplete. */
export const ENDINGS = {
  stop: { status: 'completed', event: 'response.completed', incomplete: null },
  length: { status: 'incomplete', event: 'response.incomplete', incomplete: { reason: 'max_output_tokens' } },
} as const;

/** OpenAI's error `type` by code: the Responses API shares chat's table (its errors are OpenAI's). */
export function errorType(code: ApiErrorCode): string {
  return STATUS_TABLE[code].type;
}
