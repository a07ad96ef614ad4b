/**
 * A chat response's output post-processing: the model's text in, OpenAI's message parts out
 * (`reasoning_content`, `content`, `tool_calls`), streamed or whole.
 *
 * The reasoning split comes first (a `<think>` block is never searched for tool calls), then
 * tool calls are parsed out of the remaining content. Each part runs only when the request asks
 * for it: tool calls when the request offers tools and `tool_choice` is not 'none' (the request
 * side then sets `toolCallFormat`), reasoning when the served model has a reasoning parser.
 * A request with neither gets no parser at all, so the per-token path is untouched.
 */
import {
  type ParsedToolCall,
  type ReasoningPhase,
  type ReasoningStreamParser,
  type ToolCallDelta,
  type ToolCallStreamParser,
  createReasoningParser,
  createToolCallStreamParser,
} from '../../grammar/index.js';
import type { ToolCallFormatName } from '../../proto/wire.js';
import type { OpenAiFinishReason } from '../pipeline/generation.js';
import type { GenerationRequest } from './validate.js';

/** Chat adds "tool_calls" to the reasons the pipeline reports. */
export type ChatFinishReason = OpenAiFinishReason | 'tool_calls';

/** What one piece of model text became. */
export interface ChatOutputStep {
  reasoning: string;
  content: string;
  toolCalls: readonly ToolCallDelta[];
}

/** The whole response's parts. `reasoning` is undefined when no reasoning parser runs. */
export interface ChatOutput {
  content: string;
  reasoning: string | undefined;
  toolCalls: ParsedToolCall[];
}

/** The request fields that choose the parsers (set by the request side at prepare time). */
export interface ChatOutputOptions {
  toolCallFormat?: ToolCallFormatName;
  /** A grammar forces the output to be calls: what is left unfinished at the end is dropped, never content. */
  forcedToolCalls?: boolean;
  reasoningParser?: 'think';
  reasoningStartsInPrompt?: boolean;
}

const NO_CALLS: readonly ToolCallDelta[] = Object.freeze([]);

/** One response's parsers, fed the detokenized text in order. */
export class ChatOutputParser {
  private readonly reasoningParser: ReasoningStreamParser | undefined;
  private readonly toolParser: ToolCallStreamParser | undefined;
  private calls = 0;
  private reasoningCount = 0;
  /** Tokens pushed while the phase was undecided: reasoning or not once it is decided. */
  private undecidedTokens = 0;

  constructor(input: ChatOutputOptions, newId?: () => string) {
    this.reasoningParser = input.reasoningParser === 'think' ? createReasoningParser({ startsInReasoning: input.reasoningStartsInPrompt ?? false }) : undefined;
    this.toolParser = input.toolCallFormat !== undefined ? createToolCallStreamParser(input.toolCallFormat, { ...(newId ? { newId } : {}), forced: input.forcedToolCalls ?? false }) : undefined;
  }

  /** Whether `reasoning_content` belongs in the response. */
  get splitsReasoning(): boolean {
    return this.reasoningParser !== undefined;
  }

  /** Tool calls begun so far. */
  get toolCallCount(): number {
    return this.calls;
  }

  /**
   * Generated tokens spent reasoning: every token up to and including the one that closed the
   * reasoning (`</think>`, tags counted, as Anthropic's `thinking_tokens`), all of them when the
   * output ended inside it, 0 without a reasoning parser. Counted by the `tokens` each push
   * brings: exact when a push carries one token (a delta is one token unless the client falls
   * behind the worker); a push that closes the reasoning counts whole.
   */
  get reasoningTokens(): number {
    return this.reasoningCount;
  }

  /** `tokens`: how many generated tokens made `text` (for `reasoningTokens`). */
  push(text: string, tokens = 0): ChatOutputStep {
    if (!this.reasoningParser) return this.toolStep('', text, false);
    const before = this.reasoningParser.phase;
    const split = this.reasoningParser.push(text);
    this.countReasoning(before, tokens);
    return this.toolStep(split.reasoning, split.content, false);
  }

  /** End of output: what the parsers held back. */
  finish(): ChatOutputStep {
    if (!this.reasoningParser) return this.toolStep('', '', true);
    const before = this.reasoningParser.phase;
    const split = this.reasoningParser.finish();
    this.countReasoning(before, 0);
    return this.toolStep(split.reasoning, split.content, true);
  }

  /** The phase only moves forward (undecided → reasoning → content): a push was reasoning if it started or ended there. */
  private countReasoning(before: ReasoningPhase, tokens: number): void {
    const after = this.reasoningParser!.phase;
    if (after === 'undecided') {
      this.undecidedTokens += tokens;
      return;
    }
    const reasoned = after === 'reasoning' || before === 'reasoning' || (before === 'undecided' && this.reasoningParser!.reasoned);
    if (reasoned) this.reasoningCount += this.undecidedTokens + tokens;
    this.undecidedTokens = 0;
  }

  /** The reason the response reports: a response that called tools stopped to call them. */
  finishReason(reason: OpenAiFinishReason): ChatFinishReason {
    // 'length' stays: the output was cut, and a client must not take it as a finished turn.
    return reason === 'stop' && this.calls > 0 ? 'tool_calls' : reason;
  }

  /** The whole text at once (a unary response). */
  parseAll(text: string): ChatOutput {
    const steps = [this.push(text), this.finish()];
    const toolCalls: ParsedToolCall[] = [];
    for (const step of steps) {
      for (const delta of step.toolCalls) {
        if (delta.id !== undefined) toolCalls[delta.index] = { id: delta.id, name: delta.name ?? '', arguments: delta.arguments ?? '' };
        else toolCalls[delta.index]!.arguments += delta.arguments ?? '';
      }
    }
    return {
      content: steps[0]!.content + steps[1]!.content,
      reasoning: this.reasoningParser ? steps[0]!.reasoning + steps[1]!.reasoning : undefined,
      toolCalls,
    };
  }

  private toolStep(reasoning: string, content: string, final: boolean): ChatOutputStep {
    if (!this.toolParser) return { reasoning, content, toolCalls: NO_CALLS };
    const step = content.length > 0 ? this.toolParser.push(content) : undefined;
    const end = final ? this.toolParser.finish() : undefined;
    let toolCalls = step?.toolCalls ?? NO_CALLS;
    if (end && end.toolCalls.length > 0) toolCalls = toolCalls.length > 0 ? [...toolCalls, ...end.toolCalls] : end.toolCalls;
    for (const d of toolCalls) if (d.id !== undefined) this.calls++;
    return { reasoning, content: (step?.content ?? '') + (end?.content ?? ''), toolCalls };
  }
}


/**
 * The parser a response needs, or undefined when its text goes out as it is (a completion, or a
 * chat request with neither tools to call nor a reasoning parser).
 */
export function chatOutputParser(input: GenerationRequest, newId?: () => string): ChatOutputParser | undefined {
  if (input.kind !== 'chat') return undefined;
  const callsTools = input.toolCallFormat !== undefined && input.tools !== undefined && input.tools.length > 0 && input.toolChoice !== 'none';
  if (!callsTools && input.reasoningParser !== 'think') return undefined;
  return new ChatOutputParser(
    {
      ...(callsTools ? { toolCallFormat: input.toolCallFormat, forcedToolCalls: input.forcedToolCalls !== undefined } : {}),
      ...(input.reasoningParser ? { reasoningParser: input.reasoningParser } : {}),
      ...(input.reasoningStartsInPrompt !== undefined ? { reasoningStartsInPrompt: input.reasoningStartsInPrompt } : {}),
    },
    newId,
  );
}

/** OpenAI's unary shape of a call. */
export function toolCallBody(call: ParsedToolCall): { id: string; type: 'function'; function: { name: string; arguments: string } } {
  return { id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } };
}

/** OpenAI's stream shape of a call delta: id, type and name on the first, argument text after. */
export function toolCallDeltaBody(delta: ToolCallDelta): object {
  if (delta.id !== undefined) return { index: delta.index, id: delta.id, type: 'function', function: { name: delta.name ?? '', arguments: delta.arguments ?? '' } };
  return { index: delta.index, function: { arguments: delta.arguments ?? '' } };
}
