/**
 * Tool-call formats of the model families we parse, as literal framing around JSON. The grammar
 * that forces a call (`tool_choice: "required"` or a named function) and the parser that reads
 * calls back out of free text both read this one table, so they cannot disagree.
 */
import type { ToolCallFormatName } from '../../proto/wire.js';

export interface ToolCallFormat {
  name: ToolCallFormatName;
  /** Text before the first call (e.g. Mistral's `[TOOL_CALLS][`). */
  open: string;
  /** Text before each call, after the first one's `open` (e.g. Hermes' `<tool_call>\n`). */
  callPrefix: string;
  /** Text after each call (e.g. Hermes' `\n</tool_call>`). */
  callSuffix: string;
  /** Between two calls of a parallel call list. */
  separator: string;
  /** Text after the last call (e.g. Mistral's `]`). */
  close: string;
  /** The JSON key that carries the arguments object. */
  argumentsKey: 'arguments' | 'parameters';
}

export const TOOL_CALL_FORMATS: Record<ToolCallFormatName, ToolCallFormat> = {
  // Hermes 2 Pro, Qwen 2.5 / Qwen 3: one <tool_call> block per call.
  hermes: {
    name: 'hermes',
    open: '',
    callPrefix: '<tool_call>\n',
    callSuffix: '\n</tool_call>',
    separator: '\n',
    close: '',
    argumentsKey: 'arguments',
  },
  // Llama 3.1 / 3.2 JSON tool calling: a bare object, "parameters" for the arguments.
  llama3_json: {
    name: 'llama3_json',
    open: '',
    callPrefix: '',
    callSuffix: '',
    separator: '; ',
    close: '',
    argumentsKey: 'parameters',
  },
  // Mistral: [TOOL_CALLS] then a JSON array of calls.
  mistral: {
    name: 'mistral',
    open: '[TOOL_CALLS][',
    callPrefix: '',
    callSuffix: '',
    separator: ', ',
    close: ']',
    argumentsKey: 'arguments',
  },
};
