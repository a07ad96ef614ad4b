/**
 * Every generation route (one ApiCodec each, frontend/api/): read → admit → parse (the codec) →
 * prepare → stream (SSE) or collect (unary). A client that disconnects aborts the request's
 * signal, which cancels the worker stream. Errors before the first byte are HTTP errors in the
 * codec's error shape; errors after it are the codec's stream error frame and terminator.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { DRAIN_CUT, type AdmissionGate } from '../admission.js';
import type { ApiCodec } from '../api/codec.js';
import { renameParams } from '../api/param-names.js';
import { ApiError, toApiError } from '../errors.js';
import type { FrontendMetrics, ModelMetrics } from '../metrics.js';
import { disaggHeaders } from '../disagg/response.js';
import { DIRECT_ROUTE_HEADER, type GenerationPipeline, type PreparedGeneration } from '../pipeline/generation.js';
import { admitOrThrow } from './admit.js';
import { readJsonBody } from './body.js';
import { sendError } from './respond.js';
import { SseWriter } from './sse.js';
import type { DashboardState } from '../dashboard/index.js';

export interface GenerateContext {
  pipeline: GenerationPipeline;
  gate: AdmissionGate;
  metrics: FrontendMetrics;
  maxBodyBytes: number;
  retryAfterSeconds: number;
  log: Logger;
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

const UNKNOWN_MODEL_LABEL = '_unknown';
/**
 * The abort reason when a request ends normally. abort() without a reason builds a
 * DOMException (with a stack trace) on every request; this one is made once. It only
 * becomes the cause of the cancel of a worker call that was still closing.
 */
const EXCHANGE_OVER = Object.freeze(new Error('the HTTP exchange is over'));

/** What a request still running when the drain timeout expires is told (SSE error frame or 503). */
function drainCutError(): ApiError {
  return new ApiError('unavailable', 'the frontend shut down before this request finished (drain timeout expired); retry it');
}

export async function handleGenerate(ctx: GenerateContext, codec: ApiCodec, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const startedAt = performance.now();
  const endpoint = codec.endpoint;
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);
  let modelLabel = UNKNOWN_MODEL_LABEL;
  let status = 200;
  let admitted = false;
  let modelMetrics: ModelMetrics | undefined;
  let prepared: PreparedGeneration | undefined;
  let errorCode: string | undefined;
  const outcome: Outcome = {};
  let untrack: (() => void) | undefined;
  try {
    const body = await readJsonBody(req, ctx.maxBodyBytes);
    admitOrThrow(ctx.gate, ctx.metrics, res, controller);
    admitted = true;
    const input = codec.parse(body, req.headers);
    const model = ctx.pipeline.model(input.model);
    modelLabel = model.name;
    modelMetrics = ctx.metrics.forModel(model.name);
    modelMetrics.inflight.inc();
    const header = req.headers[DIRECT_ROUTE_HEADER];
    prepared = await ctx.pipeline.prepare(input, Array.isArray(header) ? header[0] : header, startedAt, controller.signal, codec.idPrefix);
    untrack = codec.track?.(prepared, (err) => controller.abort(err));
    if (ctx.dashboard) {
      const now = Date.now();
      ctx.dashboard.requestStarted(
        { requestId: prepared.id, model: model.name, endpoint, arrivedAt: now - (performance.now() - startedAt), instanceId: prepared.firstInstance, ...(prepared.disagg ? { prefillInstanceId: prepared.disagg.route.prefillInstance } : {}) },
        now,
      );
    }
    if (input.stream) await streamResponse(ctx, codec, prepared, res, controller.signal, modelMetrics, outcome);
    else await unaryResponse(ctx, codec, prepared, res, controller.signal, modelMetrics, outcome);
    // Cut by the drain timeout: the client gets an error, never a response that just stops.
    if (controller.signal.reason === DRAIN_CUT) throw DRAIN_CUT;
    // Ended by the API (a Responses cancel): the client is still there and is told why.
    if (controller.signal.reason instanceof ApiError) throw controller.signal.reason;
    if (controller.signal.aborted) status = 499;
  } catch (err) {
    const drainCut = controller.signal.reason === DRAIN_CUT;
    // In the API's own field names: its body became a chat request, and chat's names are not the client's.
    const apiError = drainCut ? drainCutError() : renameParams(toApiError(err), codec.paramNames);
    status = controller.signal.aborted && !drainCut ? 499 : apiError.status;
    errorCode = status === 499 ? 'cancelled' : apiError.code;
    if (status >= 500 && status !== 503) ctx.log.error({ err, cause: apiError.cause }, 'request failed');
    else ctx.log.debug({ code: apiError.code, message: apiError.message }, 'request rejected');
    if (!res.headersSent) sendError(res, apiError, ctx.retryAfterSeconds, codec.errorBody);
    else if (!res.writableEnded && !res.destroyed) res.end((outcome.streamError ?? codec.streamError)(apiError));
  } finally {
    untrack?.();
    res.off('close', onClose);
    ctx.gate.offCut(controller);
    // Whatever happened, the worker stream must not outlive the HTTP exchange.
    if (!controller.signal.aborted) controller.abort(EXCHANGE_OVER);
    if (admitted) ctx.gate.release();
    if (modelMetrics) {
      modelMetrics.inflight.dec();
      modelMetrics.duration.observe((performance.now() - startedAt) / 1000);
    }
    ctx.metrics.requests.inc({ model: modelLabel, endpoint, status: String(status) });
    if (ctx.dashboard) {
      try {
        recordEnd(ctx.dashboard, prepared, outcome, status === 499 ? 'cancelled' : errorCode);
      } catch (err) {
        ctx.log.debug({ err }, 'dashboard: could not record the request'); // never the request's problem
      }
    }
  }
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
