/**
 * The OpenAI-compatible HTTP server on plain node:http. Routes:
 *   POST /v1/chat/completions, POST /v1/completions   generation (generate-handler.ts), one
 *                                                     ApiCodec per route (GENERATION_ROUTES)
 *   POST /v1/messages                                 Anthropic Messages (api/anthropic/)
 *   POST /v1/responses; GET, DELETE /v1/responses/{id}; POST /v1/responses/{id}/cancel
 *                                                     OpenAI Responses (api/responses/)
 *   POST /tokenize, /detokenize, /v1/messages/count_tokens   counting (tokenize-handler.ts)
 *   POST /v1/embeddings                               embeddings (frontend/embeddings/)
 *   GET  /v1/models, GET /v1/models/{id}             models from discovery (LoRA adapters with `parent`)
 *   POST /v1/load_lora_adapter, /v1/unload_lora_adapter   LoRA adapters on every worker of a model (frontend/lora/)
 *   GET  /health                                      200 when some model has a routable worker (503 while draining)
 *   GET  /live                                        200 while the process runs
 *   GET  /metrics                                     prom-client text
 *   GET  /dashboard, /dashboard/...                   the live dashboard (frontend/dashboard/routes.ts)
 * Before routing: API keys and CORS (auth.ts). Every handler failure is caught here, so no
 * request can take the process down.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { ApiError, modelNotFound, quoteInput, toApiError } from '../errors.js';
import { callerScope, checkAccess, corsHeaders, PREFLIGHT_HEADERS, UNAUTHORIZED_HEADERS, type AccessPolicy } from './auth.js';
import type { ModelWatcher } from '../model-watcher.js';
import { applyConnectionLimits, DEFAULT_CONNECTION_LIMITS, serverOptions, type ConnectionLimits } from './connection-limits.js';
import type { ConnectionBudget } from './connection-budget.js';
import { handleGenerate, type GenerateContext } from './generate-handler.js';
import type { ApiCodec } from '../api/codec.js';
import { chatCodec, completionCodec } from '../api/openai-codecs.js';
import { messagesCodec } from '../api/anthropic/messages-codec.js';
import { COUNT_ROUTES, handleCount } from './tokenize-handler.js';
import { ResponseStore } from '../api/responses/response-store.js';
import { responsesCodec } from '../api/responses/responses-codec.js';
import { RESPONSES_PREFIX, responsesRoute, sendResponsesRoute } from '../api/responses/responses-routes.js';
import { handleInMemory, type MemoryRequest, type MemoryResponse } from './in-memory.js';
import { dashboardKey, handleDashboard, isDashboardPath, isOpenDashboardPath, refusedPageLoad, type DashboardRoutes } from '../dashboard/index.js';
import { sendError, sendJson } from './respond.js';
import { handleEmbeddings, type EmbeddingsService } from '../embeddings/index.js';
import { readJsonBody } from './body.js';
import type { LoraAdmin } from '../lora/lora-admin.js';
import { servedAdapters, type ServedAdapter } from '../lora/served-adapters.js';

export interface HttpServerContext extends GenerateContext {
  models: ModelWatcher;
  registry: Registry;
  /** Seconds since epoch when each model was first seen. */
  modelCreated(name: string): number;
  /** Header/request/idle timeouts, connection cap, header size (connection-limits.ts). */
  limits?: ConnectionLimits;
  /** API keys; absent = every route open. */
  access?: AccessPolicy;
  /** Origins allowed by CORS; empty or absent = CORS off. */
  corsOrigins?: ReadonlySet<string>;
  /** The dashboard's routes; absent = no `/dashboard`. */
  dashboardRoutes?: DashboardRoutes;
  /** `/v1/embeddings` (frontend/embeddings/); absent = no such route. */
  embeddings?: EmbeddingsService;
  /** The Responses API's stored responses; absent = a default-sized store of this server's own. */
  responses?: ResponseStore;
  /** POST /v1/load_lora_adapter, /v1/unload_lora_adapter; absent = those routes 404. */
  loraAdmin?: LoraAdmin;
}

/**
 * The generation routes: path → the codec that speaks its API. Every one runs handleGenerate, and
 * the table also says which API a path under a route belongs to (`apiOf`).
 */
export function generationRoutes(responses: ResponseStore, access?: AccessPolicy): ReadonlyMap<string, ApiCodec> {
  return new Map<string, ApiCodec>([
    ['/v1/chat/completions', chatCodec],
    ['/v1/completions', completionCodec],
    ['/v1/responses', responsesCodec(responses, (headers) => callerScope(access, headers))],
    ['/v1/messages', messagesCodec],
  ]);
}

interface Routes {
  generation: ReadonlyMap<string, ApiCodec>;
  responses: ResponseStore;
}

/**
 * The API a path belongs to: its generation route's codec, or the codec of the route it sits
 * under (`/v1/messages/count_tokens` is Anthropic's, `/v1/responses/{id}` OpenAI's). Every error on
 * that path — 401, 405, 404, a bad body — answers in that codec's shape and field names; a path
 * under no API's route gets OpenAI's.
 */
export function apiOf(generation: ReadonlyMap<string, ApiCodec>, path: string): ApiCodec | undefined {
  const exact = generation.get(path);
  if (exact !== undefined) return exact;
  for (const [route, codec] of generation) if (path.startsWith(`${route}/`)) return codec;
  return undefined;
}

/** One request, whole: routed, answered, every failure caught (the server's request listener). */
export function createRequestHandler(ctx: HttpServerContext): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const responses = ctx.responses ?? new ResponseStore();
  const routes: Routes = { generation: generationRoutes(responses, ctx.access), responses };
  return (req, res) =>
    route(ctx, routes, req, res).catch((err: unknown) => {
      ctx.log.error({ err }, 'unhandled error in HTTP handler');
      if (!res.headersSent) sendError(res, toApiError(err), ctx.retryAfterSeconds);
      else res.destroy();
    });
}

export function createHttpServer(ctx: HttpServerContext): Server {
  const limits = ctx.limits ?? DEFAULT_CONNECTION_LIMITS;
  const handler = createRequestHandler(ctx);
  let budget: ConnectionBudget | undefined;
  const server = createServer(serverOptions(limits), (req, res) => {
    // Past --max-connections a connection may only probe (connection-budget.ts).
    if (budget?.refuse(req, res)) return;
    void handler(req, res);
  });
  budget = applyConnectionLimits(server, limits, ctx.log, ctx.retryAfterSeconds);
  return server;
}

/** The socket-free `handle()`: one request through the same handler, in memory (in-memory.ts). */
export function createMemoryHandle(ctx: HttpServerContext): (request: MemoryRequest) => Promise<MemoryResponse> {
  const handler = createRequestHandler(ctx);
  return (request) => handleInMemory(handler, request);
}

function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}

async function route(ctx: HttpServerContext, routes: Routes, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = pathOf(req);
  const method = req.method ?? 'GET';
  if (ctx.corsOrigins && ctx.corsOrigins.size > 0) {
    const origin = req.headers.origin;
    const cors = corsHeaders(ctx.corsOrigins, origin);
    if (cors) for (const [name, value] of Object.entries(cors)) res.setHeader(name, value);
    // A preflight carries no credentials: answer it before the key check.
    if (method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) {
      req.resume();
      res.writeHead(cors ? 204 : 403, cors ? PREFLIGHT_HEADERS : {});
      res.end();
      return;
    }
  }
  // The dashboard's shell and static files carry no data: a browser without the key gets the page, which asks for it.
  if (ctx.access && !(ctx.dashboardRoutes && isOpenDashboardPath(path, req.url ?? path))) {
    // A browser cannot set headers on a page load or an EventSource: under /dashboard the key
    // may also come as ?api_key= or the dashboard's cookie (dashboard-auth.ts); same check.
    const dashKey = ctx.dashboardRoutes && isDashboardPath(path) ? dashboardKey(req.url ?? path, req.headers) : undefined;
    const denied = checkAccess(ctx.access, path, dashKey !== undefined ? { ...req.headers, authorization: `Bearer ${dashKey}` } : req.headers);
    if (denied) {
      req.resume();
      if (ctx.dashboardRoutes && refusedPageLoad(path, req, res)) return;
      for (const [name, value] of Object.entries(UNAUTHORIZED_HEADERS)) res.setHeader(name, value);
      // A route answers in its own API's error shape (Anthropic clients parse theirs).
      return sendError(res, denied, ctx.retryAfterSeconds, apiOf(routes.generation, path)?.errorBody);
    }
  }
  const codec = routes.generation.get(path);
  if (codec !== undefined) {
    if (method !== 'POST') return methodNotAllowed(ctx, res, 'POST', codec);
    return handleGenerate(ctx, codec, req, res);
  }
  const count = COUNT_ROUTES.get(path);
  if (count !== undefined) {
    const api = apiOf(routes.generation, path);
    if (method !== 'POST') return methodNotAllowed(ctx, res, 'POST', api);
    return handleCount(ctx, count, req, res, api);
  }
  switch (path) {
    case '/v1/embeddings':
      if (!ctx.embeddings) break;
      if (method !== 'POST') return methodNotAllowed(ctx, res, 'POST');
      return handleEmbeddings({ ...ctx, embeddings: ctx.embeddings }, req, res);
    case '/v1/models':
      if (method !== 'GET') return methodNotAllowed(ctx, res, 'GET');
      return sendJson(res, 200, {
        object: 'list',
        data: [...ctx.models.names().map((name) => modelEntry(ctx, name)), ...servedAdapters(ctx.models).map((a) => adapterEntry(ctx, a))],
      });
    case '/v1/load_lora_adapter':
    case '/v1/unload_lora_adapter': {
      if (!ctx.loraAdmin) break;
      if (method !== 'POST') return methodNotAllowed(ctx, res, 'POST');
      let text: string;
      try {
        const body = await readJsonBody(req, 1 << 20);
        text = path === '/v1/load_lora_adapter' ? await ctx.loraAdmin.load(body) : await ctx.loraAdmin.unload(body);
      } catch (err) {
        // A refused adapter is an answer, not a fault of this server (the worker logged why).
        const apiError = toApiError(err);
        if (apiError.status >= 500) ctx.log.warn({ err }, 'LoRA admin call failed');
        return sendError(res, apiError, ctx.retryAfterSeconds);
      }
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(text);
      return;
    }
    case '/health':
      return health(ctx, res);
    case '/live':
      return sendJson(res, 200, { status: 'live' });
    case '/metrics': {
      const text = await ctx.registry.metrics();
      res.writeHead(200, { 'content-type': ctx.registry.contentType });
      res.end(text);
      return;
    }
  }
  if (ctx.dashboardRoutes && isDashboardPath(path)) return handleDashboard(ctx.dashboardRoutes, path, req, res);
  if (path.startsWith(RESPONSES_PREFIX)) {
    req.resume();
    return sendResponsesRoute(res, responsesRoute(routes.responses, method, path.slice(RESPONSES_PREFIX.length), callerScope(ctx.access, req.headers)), {
      json: (status, body) => sendJson(res, status, body),
      error: (err) => sendError(res, err, ctx.retryAfterSeconds, apiOf(routes.generation, path)?.errorBody),
    });
  }
  if (path.startsWith('/v1/models/') && method === 'GET') {
    const name = decodePathSegment(path.slice('/v1/models/'.length));
    if (name === undefined) return sendError(res, new ApiError('invalid_argument', 'the model id in the path is not valid percent-encoding', 'model'), ctx.retryAfterSeconds);
    if (ctx.models.model(name)) return sendJson(res, 200, modelEntry(ctx, name));
    const adapter = servedAdapters(ctx.models).find((a) => a.name === name);
    if (adapter) return sendJson(res, 200, adapterEntry(ctx, adapter));
    return sendError(res, modelNotFound(name), ctx.retryAfterSeconds);
  }
  req.resume();
  sendError(res, new ApiError('route_not_found', `no route for ${quoteInput(method)} ${quoteInput(path)}`), ctx.retryAfterSeconds, apiOf(routes.generation, path)?.errorBody);
}

/** `%ZZ` and friends are a client error, not a URIError 500. */
function decodePathSegment(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function methodNotAllowed(ctx: HttpServerContext, res: ServerResponse, allowed: string, codec?: ApiCodec): void {
  res.setHeader('allow', allowed);
  sendError(res, new ApiError('method_not_allowed', `use ${allowed}`), ctx.retryAfterSeconds, codec?.errorBody);
}

function modelEntry(ctx: HttpServerContext, name: string): object {
  const model = ctx.models.model(name);
  const contextLength = model?.contextLength();
  return {
    id: name,
    object: 'model',
    created: ctx.modelCreated(name),
    owned_by: 'tandem',
    ...(contextLength !== undefined && Number.isFinite(contextLength) ? { max_model_len: contextLength } : {}),
  };
}

/** An adapter in /v1/models: vLLM's shape, `parent` is the base model and `root` the adapter's path when known. */
function adapterEntry(ctx: HttpServerContext, a: ServedAdapter): object {
  return { id: a.name, object: 'model', created: ctx.modelCreated(a.parent), owned_by: 'tandem', parent: a.parent, root: a.name };
}

/** Ready = at least one model has at least one routable worker, and not draining; the body says which. */
function health(ctx: HttpServerContext, res: ServerResponse): void {
  if (ctx.gate.draining) return sendJson(res, 503, { status: 'draining', inflight: ctx.gate.inflight });
  const models = ctx.models.names().map((name) => ({ name, instances: (ctx.models.model(name)?.candidates().length ?? 0) + (ctx.embeddings?.instanceCount(name) ?? 0) }));
  const ready = models.some((m) => m.instances > 0);
  sendJson(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not_ready', models, inflight: ctx.gate.inflight });
}
