/**
 * The Responses API's output vocabulary in one table, read by the stream encoder, the unary body
 * and the stored response alike (as grammar/tool-calls/formats.ts is read by both the forcing
 * grammar and the parsers): for each kind of block the sequencer (../content-blocks.ts) makes,
 * its output item — id prefix, shape when it opens and when it is whole, content part, delta and
 * done events; the endings; and the request fields chat validation names by their Responses names.
 */
import type { ApiErrorCode } from '../../errors.js';
import { STATUS_TABLE } from '../../errors.js';
import type { ChatLogprobEntry } from '../../openai/format.js';
import type { Block, BlockKind } from '../content-blocks.js';
import type { ParamNames } from '../param-names.js';

export interface ItemSpec {
  /** The item id's prefix. */
  idPrefix: string;
  /** The item as `response.output_item.added` carries it. */
  opened(id: string, block: Block): Record<string, unknown>;
  /** The item whole, from its block (`logprobs`: the message text's, in the API's shape; [] unless asked). */
  closed(id: string, block: Block, logprobs: readonly ChatLogprobEntry[]): Record<string, unknown>;
  /** Text-bearing items open a content part; calls have none. */
  part?: Readonly<Record<string, unknown>>;
  delta: string;
  done: string;
}

const outputText = (text: string, logprobs: readonly ChatLogprobEntry[]) => ({ type: 'output_text', text, annotations: [], logprobs });

export const ITEMS: Readonly<Record<BlockKind, ItemSpec>> = {
  reasoning: {
    idPrefix: 'rs_',
    opened: (id) => ({ type: 'reasoning', id, summary: [], content: [] }),
    closed: (id, b) => ({ type: 'reasoning', id, summary: [], content: [{ type: 'reasoning_text', text: b.text }] }),
    part: { type: 'reasoning_text', text: '' },
    delta: 'response.reasoning_text.delta',
    done: 'response.reasoning_text.done',
  },
  text: {
    idPrefix: 'msg_',
    opened: (id) => ({ type: 'message', id, status: 'in_progress', role: 'assistant', content: [] }),
    closed: (id, b, logprobs) => ({ type: 'message', id, status: 'completed', role: 'assistant', content: [outputText(b.text, logprobs)] }),
    part: outputText('', []),
    delta: 'response.output_text.delta',
    done: 'response.output_text.done',
  },
  tool_call: {
    idPrefix: 'fc_',
    opened: (id, b) => ({ type: 'function_call', id, call_id: b.call?.id, name: b.call?.name, arguments: '', status: 'in_progress' }),
    closed: (id, b) => ({ type: 'function_call', id, call_id: b.call?.id, name: b.call?.name, arguments: b.text, status: 'completed' }),
    delta: 'response.function_call_arguments.delta',
    done: 'response.function_call_arguments.done',
  },
};

/** `include` values: the one Tandem answers, and OpenAI's others (accepted; Tandem has nothing to add for them). */
export const INCLUDE_LOGPROBS = 'message.output_text.logprobs';
export const INCLUDABLE: ReadonlySet<string> = new Set([
  INCLUDE_LOGPROBS,
  'reasoning.encrypted_content',
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
]);

/**
 * Chat request fields → the Responses fields they came from (responses-request.ts translates one
 * into the other), so a 400 from chat validation or the pipeline names what the client sent.
 */
export const RESPONSES_PARAMS: ParamNames = {
  max_tokens: 'max_output_tokens',
  // `text.format` is flat ({type, name, schema}); chat's response_format path does not carry over.
  response_format: () => 'text.format',
  // The chat messages are previous turns + instructions + input: their indexes are not the input's.
  messages: () => 'input',
  // Responses tools are flat: `tools[i].parameters`, `tools[i].name`.
  tools: (rest) => `tools${rest.replace(/^(\[\d+\])\.function\./, '$1.')}`,
  logprobs: () => 'include',
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
