/**
 * Codec 3: OpenAI's Responses API, `POST /v1/responses`. The request becomes a chat request
 * (responses-request.ts); the output goes through the same ChatOutputParser chat uses, and its
 * parts become output items — `reasoning`, `message`, `function_call` — in the order the model
 * produced them. Item shapes and events come from responses-events.ts.
 *
 * Stream: response.created, response.in_progress, then per item output_item.added
 * (content_part.added, *.delta…, *.done, content_part.done) output_item.done, then
 * response.completed or response.incomplete with usage — or response.failed after an error —
 * every event numbered by `sequence_number`. A stored response (store: true, the default) is
 * kept for GET and for `previous_response_id`.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { ApiError, errorBody } from '../../errors.js';
import { chatOutputParser, type ChatOutputParser, type ChatOutputStep } from '../../openai/chat-output.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../../pipeline/generation.js';
import { eventFrame, type ApiCodec, type FrameSink, type StreamEncoder, type UnaryEncoder } from '../codec.js';
import { ENDINGS, ITEMS, type ItemKind } from './responses-events.js';
import type { ResponseStore } from './response-store.js';
import { parseResponsesRequest, type ResponsesRequestInfo } from './responses-request.js';

type Item = Record<string, unknown>;

const itemId = (kind: ItemKind): string => `${ITEMS[kind].idPrefix}${randomBytes(12).toString('hex')}`;

function infoOf(prepared: PreparedGeneration): ResponsesRequestInfo {
  return prepared.input.api as ResponsesRequestInfo;
}

function usageBody(usage: Usage | null): object | null {
  if (usage === null) return null;
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** The response object, in any state. */
export function responseObject(prepared: PreparedGeneration, status: string, output: Item[], usage: Usage | null, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const info = infoOf(prepared);
  return {
    id: prepared.id,
    object: 'response',
    created_at: info.createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: null,
    instructions: info.instructions,
    max_output_tokens: info.maxOutputTokens,
    model: prepared.input.model,
    output,
    parallel_tool_calls: info.parallelToolCalls,
    previous_response_id: info.previousResponseId,
    reasoning: { effort: null, summary: null },
    store: info.store,
    temperature: info.temperature,
    text: info.text,
    tool_choice: info.toolChoice,
    tools: info.tools,
    top_p: info.topP,
    truncation: 'disabled',
    usage: usageBody(usage),
    user: info.user,
    metadata: info.metadata,
    ...extra,
  };
}

/** The assistant turn the output items make, as a chat message (for the next `previous_response_id`). */
function assistantMessage(items: Item[]): Record<string, unknown> {
  let content = '';
  let reasoning: string | undefined;
  const calls: unknown[] = [];
  for (const item of items) {
    if (item.type === 'message') content += ((item.content as Array<{ text: string }>)[0]?.text ?? '');
    if (item.type === 'reasoning') reasoning = (reasoning ?? '') + ((item.content as Array<{ text: string }>)[0]?.text ?? '');
    if (item.type === 'function_call') calls.push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } });
  }
  return { role: 'assistant', content: calls.length > 0 && content.length === 0 ? null : content, ...(calls.length > 0 ? { tool_calls: calls } : {}), ...(reasoning !== undefined ? { reasoning_content: reasoning } : {}) };
}

/** The finished response: its object (stored when asked) and the reason it records. */
function finished(store: ResponseStore, prepared: PreparedGeneration, parser: ChatOutputParser | undefined, reason: OpenAiFinishReason, items: Item[], usage: Usage): { response: Record<string, unknown>; event: string; finishReason: string } {
  const ending = ENDINGS[reason];
  const response = responseObject(prepared, ending.status, items, usage, { incomplete_details: ending.incomplete });
  const info = infoOf(prepared);
  if (info.store) store.put(prepared.id, info.owner, response, [...info.conversation, assistantMessage(items)]);
  return { response, event: ending.event, finishReason: parser ? parser.finishReason(reason) : reason };
}

/** What a started response's items are so far, for `/cancel` and `GET` while it generates. */
const liveItems = new WeakMap<PreparedGeneration, () => Item[]>();

class ResponsesStream implements StreamEncoder {
  private readonly parser: ChatOutputParser | undefined;
  private seq = 0;
  private readonly items: Item[] = [];
  private current: { kind: ItemKind; id: string; index: number; text: string; extra: Record<string, unknown> } | undefined;

  constructor(
    private readonly store: ResponseStore,
    private readonly prepared: PreparedGeneration,
  ) {
    this.parser = chatOutputParser(prepared.input);
    liveItems.set(prepared, () => [...this.items]);
  }

  private event(event: string, body: object): string {
    return eventFrame(event, JSON.stringify({ type: event, sequence_number: this.seq++, ...body }));
  }

  private send(out: FrameSink, event: string, body: object): Promise<void> | undefined {
    return out.frame(this.event(event, body));
  }

  open(out: FrameSink): void {
    const response = responseObject(this.prepared, 'in_progress', [], null);
    this.send(out, 'response.created', { response });
    this.send(out, 'response.in_progress', { response });
  }

  private openItem(out: FrameSink, kind: ItemKind, extra: Record<string, unknown> = {}): void {
    this.closeItem(out);
    const spec = ITEMS[kind];
    const id = itemId(kind);
    const index = this.items.length;
    this.current = { kind, id, index, text: '', extra };
    this.send(out, 'response.output_item.added', { output_index: index, item: spec.opened(id, extra) });
    if (spec.part) this.send(out, 'response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: spec.part });
  }

  private closeItem(out: FrameSink): void {
    const c = this.current;
    if (c === undefined) return;
    this.current = undefined;
    const spec = ITEMS[c.kind];
    const item = spec.closed(c.id, c.text, c.extra);
    if (spec.part) {
      this.send(out, spec.done, { item_id: c.id, output_index: c.index, content_index: 0, text: c.text, ...(c.kind === 'message' ? { logprobs: [] } : {}) });
      this.send(out, 'response.content_part.done', { item_id: c.id, output_index: c.index, content_index: 0, part: { ...spec.part, text: c.text } });
    } else {
      this.send(out, spec.done, { item_id: c.id, output_index: c.index, name: c.extra.name, arguments: c.text });
    }
    this.send(out, 'response.output_item.done', { output_index: c.index, item });
    this.items.push(item);
  }

  private deltaIn(out: FrameSink, kind: ItemKind, text: string): Promise<void> | undefined {
    if (this.current?.kind !== kind) this.openItem(out, kind);
    const c = this.current!;
    c.text += text;
    // The per-token frame: built from strings so only the text goes through JSON.stringify.
    const event = ITEMS[kind].delta;
    const where = ITEMS[kind].part ? `,"item_id":"${c.id}","output_index":${c.index},"content_index":0` : `,"item_id":"${c.id}","output_index":${c.index}`;
    const tail = kind === 'message' ? ',"logprobs":[]}' : '}';
    return out.frame(`event: ${event}\ndata: {"type":"${event}","sequence_number":${this.seq++}${where},"delta":${JSON.stringify(text)}${tail}\n\n`);
  }

  private step(out: FrameSink, step: ChatOutputStep): Promise<void> | undefined {
    let backpressure: Promise<void> | undefined;
    if (step.reasoning.length > 0) backpressure = this.deltaIn(out, 'reasoning', step.reasoning);
    if (step.content.length > 0) backpressure = this.deltaIn(out, 'message', step.content);
    for (const call of step.toolCalls) {
      if (call.id !== undefined) this.openItem(out, 'function_call', { call_id: call.id, name: call.name ?? '' });
      if (call.arguments !== undefined && call.arguments.length > 0) backpressure = this.deltaIn(out, 'function_call', call.arguments);
    }
    return backpressure;
  }

  delta(text: string, _logprobs: unknown, out: FrameSink): Promise<void> | undefined {
    return this.step(out, this.parser ? this.parser.push(text) : { reasoning: '', content: text, toolCalls: [] });
  }

  finish(reason: OpenAiFinishReason, usage: Usage, out: FrameSink): { finishReason: string; backpressure: Promise<void> | undefined } {
    if (this.parser) this.step(out, this.parser.finish());
    this.closeItem(out);
    const end = finished(this.store, this.prepared, this.parser, reason, this.items, usage);
    return { finishReason: end.finishReason, backpressure: this.send(out, end.event, { response: end.response }) };
  }

  done(): string {
    return '';
  }

  /** After the stream started, an error ends it as `response.failed` (status `cancelled` after a cancel), numbered in turn. */
  error(err: ApiError): string {
    const body = errorBody(err).error;
    const status = err.code === 'cancelled' ? 'cancelled' : 'failed';
    const response = responseObject(this.prepared, status, this.items, null, { error: { code: body.code, message: body.message } });
    return this.event('response.failed', { response });
  }
}

class ResponsesUnary implements UnaryEncoder {
  private text = '';
  constructor(
    private readonly store: ResponseStore,
    private readonly prepared: PreparedGeneration,
  ) {
    liveItems.set(prepared, () => []);
  }

  add(text: string): void {
    this.text += text;
  }

  body(reason: OpenAiFinishReason, usage: Usage): { body: object; finishReason: string } {
    const parser = chatOutputParser(this.prepared.input);
    const items: Item[] = [];
    const out = parser ? parser.parseAll(this.text) : { reasoning: undefined, content: this.text, toolCalls: [] };
    if (out.reasoning !== undefined && out.reasoning.length > 0) items.push(ITEMS.reasoning.closed(itemId('reasoning'), out.reasoning, {}));
    if (out.content.length > 0) items.push(ITEMS.message.closed(itemId('message'), out.content, {}));
    for (const call of out.toolCalls) items.push(ITEMS.function_call.closed(itemId('function_call'), call.arguments, { call_id: call.id, name: call.name }));
    const end = finished(this.store, this.prepared, parser, reason, items, usage);
    return { body: end.response, finishReason: end.finishReason };
  }
}

/** `ownerOf`: who a request's caller is (http/auth.ts callerScope); the store keeps each response for its owner only. */
export function responsesCodec(store: ResponseStore, ownerOf: (headers: IncomingHttpHeaders) => string = () => ''): ApiCodec {
  return {
    endpoint: 'responses',
    idPrefix: 'resp_',
    parse: (body, headers) => parseResponsesRequest(body, store, ownerOf(headers)),
    streamEncoder: (prepared) => new ResponsesStream(store, prepared),
    unaryEncoder: (prepared) => new ResponsesUnary(store, prepared),
    errorBody: (err) => errorBody(err),
    // Before an encoder exists (a cut before the first token): a bare failed event.
    streamError: (err) => eventFrame('response.failed', JSON.stringify({ type: 'response.failed', sequence_number: 0, response: { status: 'failed', error: { code: errorBody(err).error.code, message: errorBody(err).error.message } } })),
    track: (prepared, cancel) =>
      store.begin(
        prepared.id,
        infoOf(prepared).owner,
        () => responseObject(prepared, 'in_progress', liveItems.get(prepared)?.() ?? [], null),
        () => cancel(new ApiError('cancelled', 'the response was cancelled (POST /v1/responses/{id}/cancel)')),
      ),
  };
}
