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
 */
import { isUtf8 } from 'node:buffer';
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
  if (!isUtf8(bytes)) throw new ApiError('invalid_json', 'request body is not valid UTF-8');
  const fault = findJsonFault(bytes, MAX_JSON_DEPTH);
  if (fault?.kind === 'too_deep') throw new ApiError('invalid_json', `request body nests arrays or objects deeper than ${MAX_JSON_DEPTH} levels`);
  if (fault?.kind === 'lone_surrogate') {
    throw new ApiError('invalid_json', `request body has a lone UTF-16 surrogate escape at byte ${fault.offset}; send a character as a surrogate pair or as UTF-8`);
  }
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

export type JsonFault = { kind: 'too_deep' } | { kind: 'lone_surrogate'; offset: number };

/**
 * One scan of the bytes for what JSON.parse accepts but the frontend must not: `[`/`{` nested
 * deeper than `limit` outside strings, and a `\uD800`–`\uDFFF` escape that is not half of a
 * high-then-low pair. Brackets, quotes and escapes are ASCII, and UTF-8 continuation bytes never
 * equal them. Malformed JSON is left to JSON.parse.
 */
export function findJsonFault(bytes: Uint8Array, limit: number): JsonFault | undefined {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (inString) {
      if (b === 0x22) inString = false;
      else if (b !== 0x5c) continue;
      else if (bytes[i + 1] !== 0x75) i++; // backslash: skip the escaped byte
      else {
        const unit = hex4(bytes, i + 2);
        if (unit >= 0xd800 && unit <= 0xdbff) {
          const low = bytes[i + 6] === 0x5c && bytes[i + 7] === 0x75 ? hex4(bytes, i + 8) : -1;
          if (low < 0xdc00 || low > 0xdfff) return { kind: 'lone_surrogate', offset: i };
          i += 11;
        } else if (unit >= 0xdc00 && unit <= 0xdfff) return { kind: 'lone_surrogate', offset: i };
        else i += 5;
      }
    } else if (b === 0x22) inString = true;
    else if (b === 0x5b || b === 0x7b) {
      if (++depth > limit) return { kind: 'too_deep' };
    } else if (b === 0x5d || b === 0x7d) depth--;
  }
  return undefined;
}

/** The value of four hex digits at `at`, or -1 (bad digits are JSON.parse's to report). */
function hex4(bytes: Uint8Array, at: number): number {
  let value = 0;
  for (let k = at; k < at + 4; k++) {
    const c = bytes[k];
    const digit = c === undefined ? -1 : c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('body_too_large', `request body exceeds ${maxBytes} bytes`);
}
