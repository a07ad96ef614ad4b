/**
 * Reads a JSON request body with a size cap. Oversized bodies are refused from Content-Length
 * when it is declared, and otherwise as soon as the running total passes the cap, so a huge
 * upload never sits in memory.
 *
 * Two more refusals keep hostile bodies out of the rest of the frontend:
 * - the content type must be `application/json` (an optional `charset=utf-8`), else 415. A
 *   browser sends a cross-site form post or a `text/plain` fetch without a CORS preflight;
 *   refusing every other type (and none) means such a request never reaches a handler.
 * - JSON nesting deeper than MAX_JSON_DEPTH is a 400, found by one scan of the bytes before
 *   parsing, so no recursive walk downstream (validation, templates, logging) can overflow
 *   the stack on `[[[[…]]]]`.
 */
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../errors.js';

/** Deepest accepted nesting of arrays and objects; real requests (tool schemas) stay far below. */
export const MAX_JSON_DEPTH = 64;

export async function readJsonBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  if (!isJsonContentType(req.headers['content-type'])) {
    req.resume();
    throw new ApiError('unsupported_media_type', "request bodies must be JSON: send 'Content-Type: application/json'");
  }
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  const chunks: Buffer[] = [];
  let total = 0;
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      if (total > maxBytes) {
        cleanup();
        req.pause();
        reject(tooLarge(maxBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve();
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new ApiError('cancelled', `request body aborted: ${err.message}`));
    };
    const onClose = () => {
      // 'close' before 'end' means the client went away mid-body.
      if (!req.complete) onError(new Error('connection closed'));
    };
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
  // Most bodies arrive in one chunk: decode it in place rather than copying it first.
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
  if (jsonDepthExceeds(bytes, MAX_JSON_DEPTH)) throw new ApiError('invalid_json', `request body nests arrays or objects deeper than ${MAX_JSON_DEPTH} levels`);
  const text = bytes.toString('utf8');
  if (text.trim().length === 0) throw new ApiError('invalid_json', 'request body is empty; expected a JSON object');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ApiError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
}

/** `application/json`, case-insensitive, with at most a UTF-8 charset parameter. */
export function isJsonContentType(header: string | undefined): boolean {
  if (header === undefined) return false;
  const [type, ...params] = header.split(';');
  if (type!.trim().toLowerCase() !== 'application/json') return false;
  for (const param of params) {
    const [name, value = ''] = param.split('=');
    if (name!.trim().toLowerCase() !== 'charset') continue;
    const charset = value.trim().replace(/^"(.*)"$/, '$1').toLowerCase();
    if (charset !== 'utf-8' && charset !== 'utf8') return false;
  }
  return true;
}

/**
 * True when `[`/`{` nest deeper than `limit` outside strings. A byte scan: brackets and quotes
 * are ASCII, and UTF-8 continuation bytes never equal them. Malformed JSON is left to JSON.parse.
 */
export function jsonDepthExceeds(bytes: Uint8Array, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (inString) {
      if (b === 0x5c) i++; // backslash: skip the escaped byte
      else if (b === 0x22) inString = false;
    } else if (b === 0x22) inString = true;
    else if (b === 0x5b || b === 0x7b) {
      if (++depth > limit) return true;
    } else if (b === 0x5d || b === 0x7d) depth--;
  }
  return false;
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('body_too_large', `request body exceeds ${maxBytes} bytes`);
}
