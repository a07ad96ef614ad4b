/**
 * The dashboard's HTTP routes, all under `/dashboard`, GET (and HEAD) but for the session:
 *   /dashboard                      the page (page/index.html)
 *   /dashboard/assets/{name}        page files and uPlot (assets.ts)
 *   /dashboard/events               the SSE stream (event-stream.ts)
 *   /dashboard/api/snapshot         one snapshot as JSON
 *   /dashboard/api/requests/{id}    the request inspector (RequestRecord)
 *   POST /dashboard/session         the key in a header → the dashboard's cookie (204)
 * The key check happens before, in the server (dashboard-auth.ts says where keys are looked for
 * and which paths are open).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendJson } from '../http/respond.js';
import type { Asset, DashboardAssets } from './assets.js';
import { presentedKey } from '../http/auth.js';
import { DASHBOARD_PREFIX, DASHBOARD_SESSION_PATH, keyCookie, queryKey, withoutKey } from './dashboard-auth.js';
import type { DashboardState } from './dashboard-state.js';
import type { DashboardEventStream } from './event-stream.js';

export interface DashboardRoutes {
  state: DashboardState;
  stream: DashboardEventStream;
  assets: DashboardAssets;
  /** Whether API keys are on (then a `?api_key=` page load sets the cookie). */
  keysOn(): boolean;
}

/** Page files may change with a rebuild, so they are revalidated; uPlot is versioned by the package. */
const PAGE_CACHE = 'no-cache';

/** Handles a `/dashboard…` path. */
export function handleDashboard(d: DashboardRoutes, path: string, req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  if (path === DASHBOARD_SESSION_PATH) return startSession(d, req, res);
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    return notFound(res, 405, 'method_not_allowed', 'use GET');
  }
  if (path === DASHBOARD_PREFIX) {
    const url = req.url ?? DASHBOARD_PREFIX;
    const key = queryKey(url);
    // Trade the key in the URL for a cookie, and drop it from the address bar.
    if (key !== undefined && d.keysOn()) {
      res.writeHead(303, { location: withoutKey(url), 'set-cookie': keyCookie(key), 'cache-control': 'no-store' });
      res.end();
      return;
    }
    return sendAsset(req, res, d.assets.get('index.html'), 'index.html');
  }
  const rest = path.slice(DASHBOARD_PREFIX.length + 1);
  if (rest === 'events') return d.stream.attach(res);
  if (rest === 'api/snapshot') return sendJson(res, 200, d.state.view(Date.now()), { 'cache-control': 'no-store' });
  if (rest.startsWith('api/requests/')) {
    let id: string;
    try {
      id = decodeURIComponent(rest.slice('api/requests/'.length));
    } catch {
      return notFound(res, 400, 'invalid_argument', 'the request id is not valid percent-encoding');
    }
    const record = d.state.request(id);
    if (!record) return notFound(res, 404, 'request_not_found', `no finished request '${id.slice(0, 100)}' in the last requests this frontend kept`);
    return sendJson(res, 200, record, { 'cache-control': 'no-store' });
  }
  if (rest.startsWith('assets/')) {
    const name = rest.slice('assets/'.length);
    return sendAsset(req, res, d.assets.get(name), name);
  }
  notFound(res, 404, 'route_not_found', `no dashboard route '${path.slice(0, 100)}'`);
}

/**
 * `POST /dashboard/session` with the key as a header (the server checked it): the cookie the
 * page's EventSource and fetches then carry. The page's key form calls it, so a key typed into
 * the page never travels in a URL.
 */
function startSession(d: DashboardRoutes, req: IncomingMessage, res: ServerResponse): void {
  if (req.method !== 'POST') {
    res.setHeader('allow', 'POST');
    return notFound(res, 405, 'method_not_allowed', 'use POST with the key in Authorization: Bearer KEY');
  }
  if (!d.keysOn()) {
    res.writeHead(204, { 'cache-control': 'no-store' });
    res.end();
    return;
  }
  const key = presentedKey(req.headers);
  if (key === undefined) return notFound(res, 400, 'invalid_argument', 'send the key as Authorization: Bearer KEY');
  res.writeHead(204, { 'set-cookie': keyCookie(key), 'cache-control': 'no-store' });
  res.end();
}

/**
 * A browser's page load refused for its key (a wrong `?api_key=`): back to the open shell, whose
 * form says the key was refused, instead of a JSON 401 on screen. True when it answered.
 */
export function refusedPageLoad(path: string, req: IncomingMessage, res: ServerResponse): boolean {
  if (path !== DASHBOARD_PREFIX || req.method !== 'GET' || !(req.headers.accept ?? '').includes('text/html')) return false;
  res.writeHead(303, { location: `${withoutKey(req.url ?? DASHBOARD_PREFIX)}#key-refused`, 'cache-control': 'no-store' });
  res.end();
  return true;
}

function sendAsset(req: IncomingMessage, res: ServerResponse, asset: Asset | undefined, name: string): void {
  if (!asset) return notFound(res, 404, 'route_not_found', `no dashboard file '${name.slice(0, 100)}'`);
  const headers = { 'content-type': asset.contentType, etag: asset.etag, 'cache-control': PAGE_CACHE, 'x-content-type-options': 'nosniff' };
  if (req.headers['if-none-match'] === asset.etag) {
    res.writeHead(304, headers);
    res.end();
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': asset.body.length });
  res.end(req.method === 'HEAD' ? undefined : asset.body);
}

function notFound(res: ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, { error: { message, type: 'invalid_request_error', param: null, code } });
}
