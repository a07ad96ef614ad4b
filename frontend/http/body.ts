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
 * - the body must be valid UTF-8 and its strings valid Unicode, else 400 `invalid_json` like any
 *   other malformed body: invalid bytes would otherwise be replaced by U+FFFD without a word, and
 *   a lone surrogate escape (`"\ud800"`) names no character, so no tokenizer can encode it
 *   (Python servers fail on it inside the tokenizer, with a 500). A pair (`"\ud83d\ude00"`) is fine.
 *
 * A body of SLICED_PARSE_BYTES or more is scanned and parsed a slice at a time
 * (json-sliced-parse.ts), so a 16 MB body never holds the event loop (`/live`, other streams)
 * for the 30–100 ms one JSON.parse of it takes.
 */
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { ApiError } from '../errors.js';
import { type JsonFault, JsonScanner } from './json-scan.js';
import { parseJsonSliced } from './json-sliced-parse.js';

/** Deepest accepted nesting of arrays and objects; real requests (tool schemas) stay far below. */
export const MAX_JSON_DEPTH = 64;

/**
 * Bodies from this size on are parsed a slice at a time (json-sliced-parse.ts), yielding to the
 * event loop between slices; smaller ones parse in one go, in well under a millisecond or two.
 */
export const SLICED_PARSE_BYTES = 1024 * 1024;
/** About how much of a large body one JSON.parse call takes, and how long a slice may run. */
const SLICE_PIECE_BYTES = 128 * 1024;
const SLICE_MS = 4;

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
  const large = total >= SLICED_PARSE_BYTES;
  // A large body's copy and UTF-8 check are a few ms each: let waiting work in between.
  if (large) await yieldToLoop();
  // Most bodies arrive in one chunk: decode it in place rather than copying it first.
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
  chunks.length = 0;
  if (large) await yieldToLoop();
  if (!isUtf8(bytes)) throw new ApiError('invalid_json', 'request body is not valid UTF-8');
  if (large) {
    const result = await parseJsonSliced(bytes, { depthLimit: MAX_JSON_DEPTH, pieceBytes: SLICE_PIECE_BYTES, sliceMs: SLICE_MS });
    if (result.ok) return result.value;
    if ('fault' in result) throw faultError(result.fault);
    throw new ApiError('invalid_json', `request body is not valid JSON: ${result.syntax}`);
  }
  const fault = findJsonFault(bytes, MAX_JSON_DEPTH);
  if (fault) throw faultError(fault);
  const text = bytes.toString('utf8');
  if (text.trim().length === 0) throw new ApiError('invalid_json', 'request body is empty; expected a JSON object');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ApiError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
}

function faultError(fault: JsonFault): ApiError {
  switch (fault.kind) {
    case 'too_deep':
      return new ApiError('invalid_json', `request body nests arrays or objects deeper than ${MAX_JSON_DEPTH} levels`);
    case 'lone_surrogate':
      return new ApiError('invalid_json', `request body has a lone UTF-16 surrogate escape at byte ${fault.offset}; send a character as a surrogate pair or as UTF-8`);
    case 'malformed':
      return new ApiError('invalid_json', `request body is not valid JSON: unexpected character at byte ${fault.offset}`);
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
 * One scan of the bytes for what JSON.parse accepts but the frontend must not: `[`/`{` nested
 * deeper than `limit` outside strings, and a `\uD800`–`\uDFFF` escape that is not half of a
 * high-then-low pair (json-scan.ts). Malformed JSON is left to JSON.parse.
 */
export function findJsonFault(bytes: Uint8Array, limit: number): JsonFault | undefined {
  return new JsonScanner(bytes, limit).finish();
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('body_too_large', `request body exceeds ${maxBytes} bytes`);
}
