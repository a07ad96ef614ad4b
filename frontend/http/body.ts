/**
 * Reads a JSON request body with a size cap. Oversized bodies are refused from Content-Length
 * when it is declared, and otherwise as soon as the running total passes the cap, so a huge
 * upload never sits in memory.
 */
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../errors.js';

export async function readJsonBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
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
  const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total)).toString('utf8');
  if (text.trim().length === 0) throw new ApiError('invalid_json', 'request body is empty; expected a JSON object');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ApiError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('body_too_large', `request body exceeds ${maxBytes} bytes`);
}
