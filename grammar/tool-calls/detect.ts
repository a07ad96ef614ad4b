/**
 * The default `--tool-call-parser`: which tool-call format a model's chat template speaks,
 * judged from the framing the template itself writes when it renders past tool calls.
 */
import type { ToolCallFormatName } from '../../proto/wire.js';
import { LLAMA_PYTHON_TAG, toolCallMarker } from './parsers.js';

/** Which format a chat template speaks, from its text (e.g. '<tool_call>' → hermes, '[TOOL_CALLS]' → mistral, '<|python_tag|>' or 'ipython' → llama3_json), else undefined. */
export function detectToolCallFormat(chatTemplate: string): ToolCallFormatName | undefined {
  // Mistral first: its templates are the most specific (a control token of its own).
  if (chatTemplate.includes(toolCallMarker('mistral')!)) return 'mistral';
  if (chatTemplate.includes(toolCallMarker('hermes')!)) return 'hermes';
  // Llama 3.1+ templates name the tool-result role `ipython`; 3.1 also writes the python tag.
  if (chatTemplate.includes(LLAMA_PYTHON_TAG) || chatTemplate.includes('ipython')) return 'llama3_json';
  return undefined;
}
