/**
 * Every generation route (one ApiCodec each, frontend/api/): inside the shared exchange
 * (exchange.ts: read, admit, errors, metrics, cancel on disconnect) parse (the codec) → prepare
 * → stream (SSE) or collect (unary). Errors before the first byte are HTTP errors in the
 * codec's error shape; errors after it are the codec's stream error frame and terminator.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DRAIN_CUT } from '../admission.js';
import type { ApiCodec } from '../api/codec.js';
import { renameParams } from '../api/param-names.js';
import { ApiError } from '../errors.js';
import type { ModelMetrics } from '../metrics.js';
import { disaggHeaders } from '../disagg/response.js';
import { DIRECT_ROUTE_HEADER, type GenerationPipeline, type PreparedGeneration } from '../pipeline/generation.js';
import { runExchange, type Exchange, type ExchangeApi, type ExchangeContext } from './exchange.js';
import { SseWriter } from './sse.js';
import type { DashboardState } from '../dashboard/index.js';

export interface GenerateContext extends ExchangeContext {
  pipeline: GenerationPipeline;
  /** The dashboard's aggregator: told of request start, first token and end (never per token). */
  dashboard?: DashboardState;
}

/** What the response loops learn for the dashboard: the first token's time and the finish. */
interface Outcome {
  /** The started stream's own error frame, when its encoder has one. */
  streamError?: (err: ApiError) => string;
  firstTokenAt?: number;
  finishReason?: string;
  usage?: { promptTokens: number; completionTokens: number; cachedTokens: number };
}

export async function handleGenerate(ctx: GenerateContext, codec: ApiCodec, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const outcome: Outcome = {};
  let prepared: PreparedGeneration | undefined;
  const dashboard = ctx.dashboard;
  const api: ExchangeApi = {
    endpoint: codec.endpoint,
    errorBody: codec.errorBody,
    // In the API's own field names: its body became a chat request, and chat's names are not the client's.
    mapError: (err) => renameParams(err, codec.paramNames),
    streamError: (err) => (outcome.streamError ?? codec.streamError)(err),
    ...(dashboard ? { onEnd: (x: Exchange) => recordEnd(dashboard, prepared, outcome, x.errorCode) } : {}),
  };
  await runExchange(ctx, api, req, res, async (body, x) => {
    const input = codec.parse(body, req.headers);
    const model = ctx.pipeline.model(input.model);
    const modelMetrics = x.forModel(ctx.metrics, model.name);
    const header = req.headers[DIRECT_ROUTE_HEADER];
    prepared = await ctx.pipeline.prepare(input, Array.isArray(header) ? header[0] : header, x.startedAt, x.signal, codec.idPrefix);
    x.onEnd(codec.track?.(prepared, (err) => x.controller.abort(err)));
    if (dashboard) {
      const now = Date.now();
      dashboard.requestStarted(
        { requestId: prepared.id, model: model.name, endpoint: codec.endpoint, arrivedAt: now - (performance.now() - x.startedAt), instanceId: prepared.firstInstance, ...(prepared.disagg ? { prefillInstanceId: prepared.disagg.route.prefillInstance } : {}) },
        now,
      );
    }
    if (input.stream) await streamResponse(ctx, codec, prepared, res, x.signal, modelMetrics, outcome);
    else await unaryResponse(ctx, codec, prepared, res, x.signal, modelMetrics, outcome);
  });
}

function recordEnd(dashboard: DashboardState, prepared: PreparedGeneration | undefined, outcome: Outcome, errorCode: string | undefined): void {
  if (prepared === undefined) {
    if (errorCode !== undefined) dashboard.rejected(errorCode);
    return;
  }
  if (outcome.firstTokenAt !== undefined) dashboard.firstToken(prepared.id, outcome.firstTokenAt);
  const trace = prepared.disagg?.trace;
  const usage = outcome.usage ?? { promptTokens: prepared.request.tokenIds.length, completionTokens: 0, cachedTokens: 0 };
  dashboard.requestEnded(
    prepared.id,
    {
      finishReason: outcome.finishReason ?? null,
      ...(errorCode !== undefined ? { error: errorCode } : {}),
      ...usage,
      migrations: prepared.migrations,
      ...(trace
        ? {
            disagg: {
              fallback: trace.path === 'fallback',
              ...(trace.prefillSeconds !== undefined ? { prefillSeconds: trace.prefillSeconds } : {}),
              ...(trace.transferSeconds !== undefined ? { transferSeconds: trace.transferSeconds } : {}),
              ...(trace.transferBytes !== undefined ? { transferBytes: trace.transferBytes } : {}),
              ...(trace.prefillWorkerId !== undefined ? { prefillInstanceId: trace.prefillWorkerId } : {}),
              ...(trace.decodeWorkerId !== undefined ? { decodeInstanceId: trace.decodeWorkerId } : {}),
            },
          }
        : {}),
    },
    Date.now(),
  );
}

async function streamResponse(
  ctx: GenerateContext,
  codec: ApiCodec,
  prepared: PreparedGeneration,
  res: ServerResponse,
  signal: AbortSignal,
  metrics: ModelMetrics,
  outcome: Outcome,
): Promise<void> {
  const sse = new SseWriter(res);
  const encoder = codec.streamEncoder(prepared);
  if (encoder.error) outcome.streamError = (err) => encoder.error!(err);
  let opened = false;
  const open = (): void => {
    opened = true;
    sse.open({ 'x-request-id': prepared.id, [DIRECT_ROUTE_HEADER]: prepared.firstInstance, ...disaggHeaders(prepared) });
    encoder.open(sse);
  };
  // A constrained request's grammar compiles on the worker before its first token, within a
  // budget: the stream opens with that token, so a refused grammar is still an HTTP 400.
  if (prepared.request.structured === undefined) open();
  try {
    for await (const event of ctx.pipeline.run(prepared, signal, metrics)) {
      if (!opened) open();
      if (sse.closed) return;
      // frame() queues; it returns a promise only while the client is not keeping up.
      let backpressure: Promise<void> | undefined;
      if (event.type === 'delta') {
        if (outcome.firstTokenAt === undefined) outcome.firstTokenAt = Date.now();
        backpressure = encoder.delta(event.text, event.logprobs, sse, event.tokenIds.length);
      } else {
        outcome.usage = event.usage;
        outcome.firstTokenAt ??= Date.now();
        const end = encoder.finish(event.finishReason, event.usage, sse, event.stopString);
        outcome.finishReason = end.finishReason;
        backpressure = end.backpressure;
      }
      if (backpressure) await backpressure;
    }
  } catch (err) {
    // Frames already produced go out before the error frame handleGenerate writes.
    if (opened) sse.flush();
    throw err;
  }
  // Cancelled before the first token of a constrained request: nothing was sent, nothing to end.
  if (!opened && signal.aborted) return;
  if (!opened) open();
  // The pipeline stops quietly on abort; a drain cut or a cancel must still end in an error frame (handleGenerate).
  if (signal.reason === DRAIN_CUT || signal.reason instanceof ApiError) {
    sse.flush();
    return;
  }
  sse.end(encoder.done());
}

async function unaryResponse(
  ctx: GenerateContext,
  codec: ApiCodec,
  prepared: PreparedGeneration,
  res: ServerResponse,
  signal: AbortSignal,
  metrics: ModelMetrics,
  outcome: Outcome,
): Promise<void> {
  const encoder = codec.unaryEncoder(prepared);
  for await (const event of ctx.pipeline.run(prepared, signal, metrics)) {
    if (event.type === 'delta') {
      if (outcome.firstTokenAt === undefined) outcome.firstTokenAt = Date.now();
      encoder.add(event.text, event.logprobs, event.tokenIds.length);
      continue;
    }
    outcome.usage = event.usage;
    outcome.firstTokenAt ??= Date.now();
    if (res.destroyed) return;
    // The reason the body reports, the same one a stream of this request reports (tool_calls, not stop).
    const { body, finishReason } = encoder.body(event.finishReason, event.usage, event.stopString);
    outcome.finishReason = finishReason;
    const extras = codec.unaryExtras?.(prepared);
    const json = JSON.stringify(extras ? { ...body, ...extras } : body);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), 'x-request-id': prepared.id, [DIRECT_ROUTE_HEADER]: prepared.firstInstance, ...disaggHeaders(prepared) });
    res.end(json);
    return;
  }
}
