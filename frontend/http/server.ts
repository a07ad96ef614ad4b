/**
 * The OpenAI-compatible HTTP server on plain node:http. Routes:
 *   POST /v1/chat/completions, POST /v1/completions   generation (generate-handler.ts)
 *   GET  /v1/models, GET /v1/models/{id}             models from discovery
 *   GET  /health                                      200 when some model has a routable worker
 *   GET  /live                                        200 while the process runs
 *   GET  /metrics                                     prom-client text
 * Every handler failure is caught here, so no request can take the process down.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { ApiError, toApiError } from '../errors.js';
import type { ModelWatcher } from '../model-watcher.js';
import { handleGenerate, type GenerateContext } from './generate-handler.js';
import { sendError, sendJson } from './respond.js';

export interface HttpServerContext extends GenerateContext {
  models: ModelWatcher;
  registry: Registry;
  /** Seconds since epoch when each model was first seen. */
  modelCreated(name: string): number;
}

export function createHttpServer(ctx: HttpServerContext): Server {
  const server = createServer((req, res) => {
    route(ctx, req, res).catch((err: unknown) => {
      ctx.log.error({ err }, 'unhandled error in HTTP handler');
      if (!res.headersSent) sendError(res, toApiError(err), ctx.retryAfterSeconds);
      else res.destroy();
    });
  });
  // Long generations stream for minutes; only idle keep-alive sockets should time out.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });
  return server;
}

function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}

async function route(ctx: HttpServerContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = pathOf(req);
  const method = req.method ?? 'GET';
  switch (path) {
    case '/v1/chat/completions':
    case '/v1/completions':
      if (method !== 'POST') return methodNotAllowed(ctx, res, 'POST');
      return handleGenerate(ctx, path === '/v1/chat/completions' ? 'chat' : 'completion', req, res);
    case '/v1/models':
      if (method !== 'GET') return methodNotAllowed(ctx, res, 'GET');
      return sendJson(res, 200, { object: 'list', data: ctx.models.names().map((name) => modelEntry(ctx, name)) });
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
  if (path.startsWith('/v1/models/') && method === 'GET') {
    const name = decodeURIComponent(path.slice('/v1/models/'.length));
    if (ctx.models.model(name)) return sendJson(res, 200, modelEntry(ctx, name));
    return sendError(res, new ApiError('model_not_found', `The model '${name}' does not exist`, 'model'), ctx.retryAfterSeconds);
  }
  req.resume();
  sendError(res, new ApiError('route_not_found', `no route for ${method} ${path}`), ctx.retryAfterSeconds);
}

function methodNotAllowed(ctx: HttpServerContext, res: ServerResponse, allowed: string): void {
  res.setHeader('allow', allowed);
  sendError(res, new ApiError('method_not_allowed', `use ${allowed}`), ctx.retryAfterSeconds);
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

/** Ready = at least one model has at least one routable worker; the body says which. */
function health(ctx: HttpServerContext, res: ServerResponse): void {
  const models = ctx.models.names().map((name) => ({ name, instances: ctx.models.model(name)?.candidates().length ?? 0 }));
  const ready = models.some((m) => m.instances > 0);
  sendJson(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not_ready', models, inflight: ctx.gate.inflight });
}
