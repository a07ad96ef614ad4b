/**
 * The measuring HTTP client. One keep-alive agent, raw `http.request`, and an incremental
 * SSE line parser: the arrival time of every content chunk is stamped with
 * `performance.now()` into a preallocated Float64Array as soon as its bytes are read, so
 * client overhead stays out of the numbers. Failures come back as data with a stable kind
 * (`http_<status>`, `network`, `timeout`, `stream_error`, `incomplete`, `no_tokens`), never
 * as exceptions, because a benchmark expects errors and counts them. Embeddings answer with
 * one JSON body (`unarySequences`): no chunk times, and `bad_response` when the body does not
 * hold one vector per input.
 */
import http from 'node:http';
import https from 'node:https';
import { performance } from 'node:perf_hooks';

export interface StreamOutcome {
  ok: boolean;
  errorKind?: string;
  errorMessage?: string;
  /** performance.now() when the request was written. */
  sentAt: number;
  /** performance.now() when the stream ended (or failed). */
  endedAt: number;
  /** performance.now() of every chunk that carried generated text, in order. */
  chunkTimes: Float64Array;
  promptTokens?: number;
  completionTokens?: number;
  cachedTokens?: number;
  finishReason?: string;
  /** Generated text, kept only when asked (multi-turn needs it for the next turn). */
  text?: string;
}

export interface SendOptions {
  /** Expected output tokens: sizes the timestamp buffer so the hot path never reallocates. */
  expectedTokens: number;
  keepText: boolean;
  timeoutMs: number;
  /** An unstreamed JSON answer (embeddings) that must hold this many `data` items. */
  unarySequences?: number;
  signal?: AbortSignal;
}

const MAX_ERROR_BODY = 2048;

export class SseClient {
  private readonly agent: http.Agent;
  private readonly base: URL;
  private readonly transport: typeof http | typeof https;

  constructor(
    baseUrl: string,
    private readonly headers: Record<string, string> = {},
  ) {
    this.base = new URL(baseUrl);
    this.transport = this.base.protocol === 'https:' ? https : http;
    this.agent = new this.transport.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'fifo' });
  }

  /** Base URL with any trailing `/v1` removed, so `--url http://h:8000/v1` also works. */
  resolve(path: string): URL {
    const prefix = this.base.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
    return new URL(prefix + path, this.base);
  }

  send(path: string, body: string, options: SendOptions): Promise<StreamOutcome> {
    const url = this.resolve(path);
    return new Promise((resolve) => {
      let times = new Float64Array(Math.max(4, options.expectedTokens + 2));
      let count = 0;
      let text = options.keepText ? '' : undefined;
      let buffer = '';
      let done = false;
      let settled = false;
      const outcome: StreamOutcome = { ok: false, sentAt: 0, endedAt: 0, chunkTimes: times };

      const finish = (errorKind?: string, errorMessage?: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        outcome.endedAt = performance.now();
        outcome.chunkTimes = times.subarray(0, count);
        if (text !== undefined) outcome.text = text;
        if (!errorKind && !done) errorKind = 'incomplete';
        if (!errorKind && count === 0 && options.unarySequences === undefined) errorKind = 'no_tokens';
        if (errorKind) {
          outcome.errorKind = errorKind;
          outcome.errorMessage = errorMessage ?? describeKind(errorKind);
        } else {
          outcome.ok = true;
        }
        resolve(outcome);
      };

      const onEvent = (payload: string, now: number) => {
        if (payload === '[DONE]') {
          done = true;
          return;
        }
        let event: ChunkJson;
        try {
          event = JSON.parse(payload) as ChunkJson;
        } catch {
          finish('stream_error', `unparseable SSE data: ${payload.slice(0, 200)}`);
          req.destroy();
          return;
        }
        if (event.error && event.type === undefined) {
          finish('stream_error', typeof event.error === 'string' ? event.error : (event.error.message ?? JSON.stringify(event.error)));
          req.destroy();
          return;
        }
        // The Responses and Messages APIs name their events in `type` and end without [DONE].
        if (typeof event.type === 'string') {
          const piece = vendorEvent(event, outcome);
          if (piece === FAILED) {
            finish('stream_error', (typeof event.error === 'object' ? event.error?.message : undefined) ?? event.response?.error?.message ?? `${event.type} event`);
            req.destroy();
            return;
          }
          if (piece === ENDED) done = true;
          else if (piece !== undefined && piece.length > 0) {
            if (count === times.length) {
              const grown = new Float64Array(times.length * 2);
              grown.set(times);
              times = grown;
            }
            times[count++] = now;
            if (text !== undefined) text += piece;
          }
          return;
        }
        const choice = event.choices?.[0];
        if (choice) {
          const piece = choice.text ?? choice.delta?.content ?? choice.delta?.reasoning_content;
          if (typeof piece === 'string' && piece.length > 0) {
            if (count === times.length) {
              const grown = new Float64Array(times.length * 2);
              grown.set(times);
              times = grown;
            }
            times[count++] = now;
            if (text !== undefined) text += piece;
          }
          if (choice.finish_reason) outcome.finishReason = choice.finish_reason;
        }
        const usage = event.usage;
        if (usage) {
          if (typeof usage.prompt_tokens === 'number') outcome.promptTokens = usage.prompt_tokens;
          if (typeof usage.completion_tokens === 'number') outcome.completionTokens = usage.completion_tokens;
          const cached = usage.prompt_tokens_details?.cached_tokens;
          if (typeof cached === 'number') outcome.cachedTokens = cached;
        }
      };

      const onData = (chunk: string) => {
        const now = performance.now();
        buffer += chunk;
        let start = 0;
        for (;;) {
          const nl = buffer.indexOf('\n', start);
          if (nl < 0) break;
          let end = nl;
          if (end > start && buffer.charCodeAt(end - 1) === 13) end--;
          // "data:" prefix; everything else (blank lines, comments, event names) is framing.
          if (end - start > 5 && buffer.startsWith('data:', start)) {
            const payload = buffer.slice(start + 5, end).trim();
            onEvent(payload, now);
            if (settled) return;
          }
          start = nl + 1;
        }
        buffer = start === 0 ? buffer : buffer.slice(start);
      };

      const req = this.transport.request(url, {
        method: 'POST',
        agent: this.agent,
        headers: {
          ...this.headers,
          'content-type': 'application/json',
          accept: options.unarySequences === undefined ? 'text/event-stream' : 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      const onAbort = () => {
        finish('cancelled', 'run aborted');
        req.destroy();
      };
      const timer = setTimeout(() => {
        finish('timeout', `no complete response within ${options.timeoutMs} ms`);
        req.destroy();
      }, options.timeoutMs);
      options.signal?.addEventListener('abort', onAbort, { once: true });
      if (options.signal?.aborted) onAbort();

      req.on('response', (res) => {
        res.setEncoding('utf8');
        const status = res.statusCode ?? 0;
        if (status !== 200) {
          let errorBody = '';
          res.on('data', (c: string) => {
            if (errorBody.length < MAX_ERROR_BODY) errorBody += c;
          });
          res.on('end', () => finish(`http_${status}`, `HTTP ${status}: ${summarizeErrorBody(errorBody)}`));
          res.on('error', (err) => finish(`http_${status}`, `HTTP ${status}: ${err.message}`));
          return;
        }
        if (options.unarySequences !== undefined) {
          const expected = options.unarySequences;
          let json = '';
          res.on('data', (c: string) => (json += c));
          res.on('end', () => {
            const problem = readUnary(json, expected, outcome);
            done = true;
            if (problem) finish('bad_response', problem);
            else finish();
          });
          res.on('error', (err) => finish('network', err.message));
          return;
        }
        res.on('data', onData);
        res.on('end', () => {
          if (buffer.length > 0) onData('\n');
          finish();
        });
        res.on('error', (err) => finish('network', err.message));
      });
      req.on('error', (err: NodeJS.ErrnoException) => finish('network', `${err.code ?? 'error'}: ${err.message}`));
      outcome.sentAt = performance.now();
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

interface VendorUsage {
  input_tokens?: number;
  output_tokens?: number;
  input_tokens_details?: { cached_tokens?: number };
  cache_read_input_tokens?: number;
  cache_creation_input_tokens?: number;
}

interface ChunkJson {
  choices?: { text?: string; delta?: { content?: string | null; reasoning_content?: string | null }; finish_reason?: string | null }[];
  usage?: ({ prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } & VendorUsage) | null;
  error?: { message?: string } | string;
  /** Responses and Messages events. */
  type?: string;
  delta?: string | { text?: string; thinking?: string; partial_json?: string; stop_reason?: string | null };
  response?: { status?: string; usage?: VendorUsage | null; error?: { message?: string } | null; incomplete_details?: { reason?: string } | null };
  message?: { usage?: VendorUsage };
}

const ENDED = Symbol('ended');
const FAILED = Symbol('failed');

/**
 * One Responses or Messages event: the generated text it carries, ENDED at the terminal event
 * (usage recorded into `outcome`), FAILED for an error event, else undefined.
 */
function vendorEvent(event: ChunkJson, outcome: StreamOutcome): string | typeof ENDED | typeof FAILED | undefined {
  const usage = (u: VendorUsage | null | undefined) => {
    if (!u) return;
    // Anthropic's input_tokens leaves out the cached part: its prompt is the sum of all three.
    if (typeof u.input_tokens === 'number') outcome.promptTokens = u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
    if (typeof u.output_tokens === 'number') outcome.completionTokens = u.output_tokens;
    const cached = u.input_tokens_details?.cached_tokens ?? u.cache_read_input_tokens;
    if (typeof cached === 'number') outcome.cachedTokens = cached;
  };
  switch (event.type) {
    case 'response.output_text.delta':
    case 'response.reasoning_text.delta':
    case 'response.function_call_arguments.delta':
      return typeof event.delta === 'string' ? event.delta : undefined;
    case 'content_block_delta':
      return typeof event.delta === 'object' ? (event.delta.text ?? event.delta.thinking ?? event.delta.partial_json) : undefined;
    case 'message_start':
      usage(event.message?.usage);
      return undefined;
    case 'message_delta':
      usage(event.usage);
      if (typeof event.delta === 'object' && event.delta.stop_reason) outcome.finishReason = event.delta.stop_reason === 'max_tokens' ? 'length' : 'stop';
      return undefined;
    case 'message_stop':
      return ENDED;
    case 'response.completed':
    case 'response.incomplete':
      usage(event.response?.usage);
      outcome.finishReason = event.type === 'response.incomplete' ? 'length' : 'stop';
      return ENDED;
    case 'response.failed':
    case 'error':
      return FAILED;
    default:
      return undefined;
  }
}

/** An embeddings body: usage into `outcome`; a reason when it is not one vector per input. */
function readUnary(body: string, expected: number, outcome: StreamOutcome): string | undefined {
  let parsed: { data?: unknown[]; usage?: { prompt_tokens?: number } };
  try {
    parsed = JSON.parse(body) as typeof parsed;
  } catch {
    return `unparseable JSON body: ${body.slice(0, 200)}`;
  }
  if (typeof parsed.usage?.prompt_tokens === 'number') outcome.promptTokens = parsed.usage.prompt_tokens;
  const got = Array.isArray(parsed.data) ? parsed.data.length : 0;
  return got === expected ? undefined : `expected ${expected} embeddings, got ${got}`;
}

function describeKind(kind: string): string {
  if (kind === 'incomplete') return 'stream ended before data: [DONE]';
  if (kind === 'no_tokens') return 'stream finished without generating any text';
  return kind;
}

/** OpenAI-shaped errors carry the useful part in error.message. */
function summarizeErrorBody(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: string } | string; message?: string };
    const message = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? parsed.message);
    if (message) return message.slice(0, 300);
  } catch {
    // not JSON: fall through to the raw text
  }
  return body.slice(0, 300) || '(empty body)';
}
