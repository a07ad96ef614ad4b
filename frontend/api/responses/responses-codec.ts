/**
 * Codec 3: OpenAI's Responses API, `POST /v1/responses`. The request becomes a chat request
 * (responses-request.ts); the output goes through the one content-block sequencer
 * (../content-blocks.ts, over the ChatOutputParser chat uses), whose blocks become output items —
 * `reasoning`, `message`, `function_call` — in the order the model produced them, streamed and
 * unary alike. Item shapes, events and the request fields' names come from responses-events.ts.
 * `usage.output_tokens_details.reasoning_tokens` is the sequencer's count; a message's
 * `output_text` carries its tokens' logprobs when `include` asks for them.
 *
 * Stream: response.created, response.in_progress, then per item output_item.added
 * (content_part.added, *.delta…, *.done, content_part.done) output_item.done, then
 * response.completed or response.incomplete with usage — or response.failed after an error —
 * every event numbered by `sequence_number`. A stored response (store: true, the default) is
 * kept for GET and for `previous_response_id`.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { TokenLogprob } from '../../../proto/wire.js';
import { ApiError, errorBody } from '../../errors.js';
import { chatLogprobs, TokenNamer, type ChatLogprobEntry } from '../../openai/format.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../../pipeline/generation.js';
import { eventFrame, type ApiCodec, type FrameSink, type StreamEncoder, type UnaryEncoder } from '../codec.js';
import { BlockSequencer, type BlockHooks, type BlocksEnd, type BlockKind } from '../content-blocks.js';
import { ENDINGS, ITEMS, RESPONSES_PARAMS } from './responses-events.js';
import type { ResponseStore } from './response-store.js';
import { parseResponsesRequest, type ResponsesRequestInfo } from './responses-request.js';

type Item = Record<string, unknown>;

const itemId = (kind: BlockKind): string => `${ITEMS[kind].idPrefix}${randomBytes(12).toString('hex')}`;

function infoOf(prepared: PreparedGeneration): ResponsesRequestInfo {
  return prepared.input.api as ResponsesRequestInfo;
}

/** `reasoningTokens`: the sequencer's count of generated tokens spent reasoning (part of output_tokens). */
function usageBody(usage: Usage | null, reasoningTokens: number): object | null {
  if (usage === null) return null;
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: reasoningTokens },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** The response object, in any state. */
export function responseObject(prepared: PreparedGeneration, status: string, output: Item[], usage: Usage | null, reasoningTokens = 0, extra: Record<string, unknown> = {}): Record<string, unknown> {
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
    top_logprobs: info.topLogprobs,
    top_p: info.topP,
    truncation: 'disabled',
    usage: usageBody(usage, reasoningTokens),
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
function finished(store: ResponseStore, prepared: PreparedGeneration, end: BlocksEnd, reason: OpenAiFinishReason, items: Item[], usage: Usage): { response: Record<string, unknown>; event: string; finishReason: string } {
  const ending = ENDINGS[reason];
  const response = responseObject(prepared, ending.status, items, usage, end.reasoningTokens, { incomplete_details: ending.incomplete });
  const info = infoOf(prepared);
  if (info.store) store.put(prepared.id, info.owner, response, [...info.conversation, assistantMessage(items)]);
  return { response, event: ending.event, finishReason: end.finishReason };
}

/** What a started response's items are so far, for `/cancel` and `GET` while it generates. */
const liveItems = new WeakMap<PreparedGeneration, () => Item[]>();

/**
 * One response's output items, stream or unary: the sequencer's blocks become items (ITEMS), each
 * closed item kept in order. `frames` is the stream's event writer; the unary answer has none.
 */
class ResponseItems {
  readonly items: Item[] = [];
  private readonly ids: string[] = [];
  private readonly namer: TokenNamer | undefined;

  constructor(
    prepared: PreparedGeneration,
    private readonly frames?: { send(out: FrameSink, event: string, body: object): void; seq(): number },
  ) {
    // `include: ["message.output_text.logprobs"]` asked for them (the request then carries `logprobs`).
    this.namer = prepared.input.logprobs !== undefined ? new TokenNamer(prepared.codec, false) : undefined;
    liveItems.set(prepared, () => [...this.items]);
  }

  logprobs(entries: readonly TokenLogprob[]): ChatLogprobEntry[] {
    return this.namer && entries.length > 0 ? chatLogprobs(entries, this.namer) : [];
  }

  readonly hooks: BlockHooks<FrameSink | undefined> = {
    // The whole item (its done events, the response's output) carries the text.
    keepsText: true,
    open: (block, out) => {
      const id = itemId(block.kind);
      this.ids[block.index] = id;
      if (!this.frames || !out) return;
      const spec = ITEMS[block.kind];
      this.frames.send(out, 'response.output_item.added', { output_index: block.index, item: spec.opened(id, block) });
      if (spec.part) this.frames.send(out, 'response.content_part.added', { item_id: id, output_index: block.index, content_index: 0, part: spec.part });
    },
    delta: (block, text, logprobs, out) => {
      if (!this.frames || !out) return undefined;
      const id = this.ids[block.index]!;
      const spec = ITEMS[block.kind];
      // The per-token frame: built from strings so only the text (and any logprobs) go through JSON.stringify.
      const where = spec.part ? `,"item_id":"${id}","output_index":${block.index},"content_index":0` : `,"item_id":"${id}","output_index":${block.index}`;
      const tail = block.kind === 'text' ? `,"logprobs":${logprobs.length > 0 ? JSON.stringify(this.logprobs(logprobs)) : '[]'}}` : '}';
      return out.frame(`event: ${spec.delta}\ndata: {"type":"${spec.delta}","sequence_number":${this.frames.seq()}${where},"delta":${JSON.stringify(text)}${tail}\n\n`);
    },
    close: (block, out) => {
      const id = this.ids[block.index]!;
      const spec = ITEMS[block.kind];
      const logprobs = block.kind === 'text' ? this.logprobs(block.logprobs) : [];
      const item = spec.closed(id, block, logprobs);
      if (this.frames && out) {
        if (spec.part) {
          this.frames.send(out, spec.done, { item_id: id, output_index: block.index, content_index: 0, text: block.text, ...(block.kind === 'text' ? { logprobs } : {}) });
          this.frames.send(out, 'response.content_part.done', { item_id: id, output_index: block.index, content_index: 0, part: (item.content as object[])[0] });
        } else {
          this.frames.send(out, spec.done, { item_id: id, output_index: block.index, name: block.call?.name, arguments: block.text });
        }
        this.frames.send(out, 'response.output_item.done', { output_index: block.index, item });
      }
      this.items.push(item);
    },
  };
}

class ResponsesStream implements StreamEncoder {
  private seq = 0;
  private readonly output: ResponseItems;
  private readonly blocks: BlockSequencer<FrameSink | undefined>;

  constructor(
    private readonly store: ResponseStore,
    private readonly prepared: PreparedGeneration,
  ) {
    this.output = new ResponseItems(prepared, { send: (out, event, body) => void this.send(out, event, body), seq: () => this.seq++ });
    this.blocks = new BlockSequencer(prepared, this.output.hooks);
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

  delta(text: string, logprobs: readonly TokenLogprob[] | undefined, out: FrameSink, tokens = 0): Promise<void> | undefined {
    return this.blocks.push(text, tokens, logprobs, out);
  }

  finish(reason: OpenAiFinishReason, usage: Usage, out: FrameSink): { finishReason: string; backpressure: Promise<void> | undefined } {
    const end = finished(this.store, this.prepared, this.blocks.finish(reason, out), reason, this.output.items, usage);
    return { finishReason: end.finishReason, backpressure: this.send(out, end.event, { response: end.response }) };
  }

  done(): string {
    return '';
  }

  /** After the stream started, an error ends it as `response.failed` (status `cancelled` after a cancel), numbered in turn. */
  error(err: ApiError): string {
    const body = errorBody(err).error;
    const status = err.code === 'cancelled' ? 'cancelled' : 'failed';
    const response = responseObject(this.prepared, status, this.output.items, null, 0, { error: { code: body.code, message: body.message } });
    return this.event('response.failed', { response });
  }
}

class ResponsesUnary implements UnaryEncoder {
  private readonly output: ResponseItems;
  private readonly blocks: BlockSequencer<FrameSink | undefined>;

  constructor(
    private readonly store: ResponseStore,
    private readonly prepared: PreparedGeneration,
  ) {
    this.output = new ResponseItems(prepared);
    this.blocks = new BlockSequencer(prepared, this.output.hooks);
  }

  add(text: string, logprobs: readonly TokenLogprob[] | undefined, tokens = 0): void {
    this.blocks.push(text, tokens, logprobs, undefined);
  }

  body(reason: OpenAiFinishReason, usage: Usage): { body: object; finishReason: string } {
    const end = finished(this.store, this.prepared, this.blocks.finish(reason, undefined), reason, this.output.items, usage);
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
    paramNames: RESPONSES_PARAMS,
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
