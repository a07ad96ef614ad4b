/**
 * One HTTP exchange that runs work on workers, from the first byte to the last metric: the
 * lifecycle every such route shares (generation through its codecs, embeddings), so none of
 * them repeats it.
 *
 *   read the JSON body ─▶ admit (503 when full or draining) ─▶ the route's work(body, exchange)
 *     ─▶ after it: a drain cut or an API cancel is an error; a client that left is a 499
 *   any error ─▶ the API's error body (before the first byte) or its stream error frame (after)
 *   always ─▶ the worker calls are cancelled (the request's signal aborts), the admission slot
 *             is released, inflight/duration/requests metrics, then the route's `onEnd` hooks
 *             (the dashboard record, a tracker's release) with the exchange's outcome.
 *
 * A client that disconnects aborts `exchange.signal`, which cancels the worker call.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { DRAIN_CUT, type AdmissionGate } from '../admission.js';
import { ApiError, toApiError } from '../errors.js';
import type { FrontendMetrics, ModelMetrics } from '../metrics.js';
import { admitOrThrow } from './admit.js';
import { readJsonBody } from './body.js';
import { sendError } from './respond.js';

/** What every exchange needs from the server. */
export interface ExchangeContext {
  gate: AdmissionGate;
  metrics: FrontendMetrics;
  maxBodyBytes: number;
  retryAfterSeconds: number;
  log: Logger;
}

/** How a route's API speaks: its metric label and its error shapes. */
export interface ExchangeApi {
  /** The `endpoint` label of `tandem_frontend_requests_total`. */
  endpoint: string;
  /** The error body before the first byte; default OpenAI's. */
  errorBody?: (err: ApiError) => object;
  /** Rewrites an error before it is sent (a codec's parameter names); default: as it is. */
  mapError?: (err: ApiError) => ApiError;
  /** The framed error that ends a response already started (a stream); absent = the socket is closed. */
  streamError?: (err: ApiError) => string;
  /** Told of every exchange once it is over, rejected ones included (the dashboard's record). */
  onEnd?: (exchange: Exchange) => void;
}

const UNKNOWN_MODEL_LABEL = '_unknown';
/**
 * The abort reason when an exchange ends normally. abort() without a reason builds a
 * DOMException (with a stack trace) on every request; this one is made once. It only becomes
 * the cause of the cancel of a worker call that was still closing.
 */
const EXCHANGE_OVER = Object.freeze(new Error('the HTTP exchange is over'));

/** What a request still running when the drain timeout expires is told (a stream error frame or a 503). */
function drainCutError(): ApiError {
  return new ApiError('unavailable', 'the frontend shut down before this request finished (drain timeout expired); retry it');
}

/** One request's state as its route's work and its end hooks see it. */
export class Exchange {
  readonly startedAt = performance.now();
  readonly controller = new AbortController();
  /** HTTP status the client got (499: it went away first). */
  status = 200;
  private code: string | undefined;
  private modelLabel = UNKNOWN_MODEL_LABEL;
  private modelMetrics: ModelMetrics | undefined;
  private readonly endHooks: Array<() => void> = [];

  /** Aborts when the client disconnects, the drain runs out, the API cancels, or the exchange ends. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The error code the exchange ended with: `cancelled` for a client that left, undefined for a success. */
  get errorCode(): string | undefined {
    return this.status === 499 ? 'cancelled' : this.code;
  }

  /** The model is known: label the metrics with it and count the request in flight. */
  forModel(metrics: FrontendMetrics, name: string): ModelMetrics {
    this.modelLabel = name;
    this.modelMetrics ??= metrics.forModel(name);
    this.modelMetrics.inflight.inc();
    return this.modelMetrics;
  }

  /** Runs `hook` once the exchange is over (after the metrics), whatever happened. */
  onEnd(hook: (() => void) | undefined): void {
    if (hook !== undefined) this.endHooks.push(hook);
  }

  /** @internal runExchange's bookkeeping. */
  fail(code: string): void {
    this.code = code;
  }

  /** @internal */
  finish(ctx: ExchangeContext, endpoint: string, onEnd: ((x: Exchange) => void) | undefined): void {
    if (this.modelMetrics) {
      this.modelMetrics.inflight.dec();
      this.modelMetrics.duration.observe((performance.now() - this.startedAt) / 1000);
    }
    ctx.metrics.requests.inc({ model: this.modelLabel, endpoint, status: String(this.status) });
    if (onEnd) this.endHooks.push(() => onEnd(this));
    for (const hook of this.endHooks) {
      try {
        hook();
      } catch (err) {
        ctx.log.debug({ err }, 'could not record the end of a request'); // never the request's problem
      }
    }
  }
}

/** The whole exchange: `work` parses the body and answers; this does the rest (see the file comment). */
export async function runExchange(
  ctx: ExchangeContext,
  api: ExchangeApi,
  req: IncomingMessage,
  res: ServerResponse,
  work: (body: unknown, exchange: Exchange) => Promise<void>,
): Promise<void> {
  const x = new Exchange();
  const controller = x.controller;
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);
  let admitted = false;
  try {
    const body = await readJsonBody(req, ctx.maxBodyBytes);
    admitOrThrow(ctx.gate, ctx.metrics, res, controller);
    admitted = true;
    await work(body, x);
    // Cut by the drain timeout: the client gets an error, never a response that just stops.
    if (controller.signal.reason === DRAIN_CUT) throw DRAIN_CUT;
    // Ended by the API (a Responses cancel): the client is still there and is told why.
    if (controller.signal.reason instanceof ApiError) throw controller.signal.reason;
    if (controller.signal.aborted) x.status = 499;
  } catch (err) {
    const drainCut = controller.signal.reason === DRAIN_CUT;
    const apiError = drainCut ? drainCutError() : (api.mapError ?? ((e: ApiError) => e))(toApiError(err));
    x.status = controller.signal.aborted && !drainCut ? 499 : apiError.status;
    x.fail(apiError.code);
    if (x.status >= 500 && x.status !== 503) ctx.log.error({ err, cause: apiError.cause, endpoint: api.endpoint }, 'request failed');
    else ctx.log.debug({ code: apiError.code, message: apiError.message, endpoint: api.endpoint }, 'request rejected');
    if (!res.headersSent) sendError(res, apiError, ctx.retryAfterSeconds, api.errorBody);
    else if (!res.writableEnded && !res.destroyed) {
      if (api.streamError) res.end(api.streamError(apiError));
      else res.destroy();
    }
  } finally {
    res.off('close', onClose);
    ctx.gate.offCut(controller);
    // Whatever happened, the worker call must not outlive the HTTP exchange.
    if (!controller.signal.aborted) controller.abort(EXCHANGE_OVER);
    if (admitted) ctx.gate.release();
    x.finish(ctx, api.endpoint, api.onEnd);
  }
}
