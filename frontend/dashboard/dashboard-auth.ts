/**
 * How a browser presents the API key to `/dashboard` (when `--api-key` / `--api-key-file` is
 * set). A browser cannot put a header on a page load or on an `EventSource`, so under
 * `/dashboard` two more places count, after the usual `Authorization: Bearer` / `x-api-key`:
 *
 *   1. `?api_key=KEY` on any `/dashboard` URL. A page load with it gets a cookie (below) and a
 *      303 to the same URL without the key, so the key does not stay in the address bar or
 *      the history.
 *   2. Cookie `tandem_dashboard_key=KEY` (HttpOnly, SameSite=Strict, Path=/dashboard): the
 *      page's assets and its EventSource carry it without the page's script seeing it.
 *
 * How a browser gets the cookie without a key in any URL: the page shell and its static files
 * are open (`isOpenDashboardPath`: the same files for every deployment, no data in them), so
 * `/dashboard` always loads; its stream is refused (401), and the page asks for the key and
 * sends it once as a header, `POST /dashboard/session` with `Authorization: Bearer KEY`, whose
 * answer (after the usual key check) sets the cookie. The script holds the key only for that
 * call: not in storage, not in a URL, and the cookie is not readable by script.
 *
 * The key found is checked by the same `ApiKeySet.matches` (constant-time) as every other route;
 * only where it is looked for differs. Outside `/dashboard` neither the query nor the cookie counts.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { presentedKey } from '../http/auth.js';

export const DASHBOARD_PREFIX = '/dashboard';
export const DASHBOARD_COOKIE = 'tandem_dashboard_key';
export const DASHBOARD_KEY_PARAM = 'api_key';

export const DASHBOARD_SESSION_PATH = `${DASHBOARD_PREFIX}/session`;
const ASSETS_PREFIX = `${DASHBOARD_PREFIX}/assets/`;

export function isDashboardPath(path: string): boolean {
  return path === DASHBOARD_PREFIX || path.startsWith(`${DASHBOARD_PREFIX}/`);
}

/**
 * What any browser may load without a key: the page shell (unless it carries `?api_key=`, which
 * is checked like any key) and its static files. The data (`events`, `api/*`) needs the key.
 */
export function isOpenDashboardPath(path: string, url: string): boolean {
  if (path === DASHBOARD_PREFIX) return queryKey(url) === undefined;
  return path.startsWith(ASSETS_PREFIX);
}

/** The `api_key` query parameter of a request URL, if any. */
export function queryKey(url: string): string | undefined {
  const q = url.indexOf('?');
  if (q === -1) return undefined;
  const value = new URLSearchParams(url.slice(q + 1)).get(DASHBOARD_KEY_PARAM);
  return value !== null && value.length > 0 ? value : undefined;
}

export function cookieKey(headers: IncomingHttpHeaders): string | undefined {
  const cookie = headers.cookie;
  if (cookie === undefined) return undefined;
  for (const part of cookie.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1 || part.slice(0, eq).trim() !== DASHBOARD_COOKIE) continue;
    try {
      const value = decodeURIComponent(part.slice(eq + 1).trim());
      return value.length > 0 ? value : undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Header, then query, then cookie. */
export function dashboardKey(url: string, headers: IncomingHttpHeaders): string | undefined {
  return presentedKey(headers) ?? queryKey(url) ?? cookieKey(headers);
}

export function keyCookie(key: string): string {
  return `${DASHBOARD_COOKIE}=${encodeURIComponent(key)}; Path=${DASHBOARD_PREFIX}; HttpOnly; SameSite=Strict`;
}

/** The URL without its `api_key` parameter (for the redirect after setting the cookie). */
export function withoutKey(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return url;
  const params = new URLSearchParams(url.slice(q + 1));
  params.delete(DASHBOARD_KEY_PARAM);
  const rest = params.toString();
  return rest.length > 0 ? `${url.slice(0, q)}?${rest}` : url.slice(0, q);
}
