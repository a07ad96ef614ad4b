/**
 * `handle()` without a socket: one request through the same route function the HTTP server
 * runs, with a request stream and a response object that live in memory. Lets a test (the
 * codec contract suite) exercise a route end to end — auth, admission, the codec, the pipeline —
 * without opening a port. The response is complete when the promise resolves.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';

export interface MemoryRequest {
  method?: string;
  /** Path and query, e.g. `/v1/messages`. */
  path: string;
  headers?: Record<string, string>;
  /** A string is sent as is; anything else as JSON (with `content-type: application/json`). */
  body?: unknown;
}

export interface MemoryResponse {
  status: number;
  headers: Record<string, string>;
  text: string;
  json<T = unknown>(): T;
}

export type RouteFunction = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** What the handlers use of a ServerResponse, kept in memory. */
class MemoryServerResponse extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableEnded = false;
  writableFinished = false;
  destroyed = false;
  private readonly headerMap = new Map<string, string>();
  private readonly chunks: string[] = [];
  readonly finished: Promise<void>;
  private resolveFinished!: () => void;

  constructor() {
    super();
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
  }

  setHeader(name: string, value: string | number | readonly string[]): this {
    this.headerMap.set(name.toLowerCase(), Array.isArray(value) ? value.join(', ') : String(value));
    return this;
  }

  getHeader(name: string): string | undefined {
    return this.headerMap.get(name.toLowerCase());
  }

  writeHead(status: number, headers: OutgoingHttpHeaders = {}): this {
    this.statusCode = status;
    for (const [name, value] of Object.entries(headers)) if (value !== undefined) this.setHeader(name, value as string);
    this.headersSent = true;
    return this;
  }

  flushHeaders(): void {
    this.headersSent = true;
  }

  write(chunk: string | Uint8Array): boolean {
    this.headersSent = true;
    this.chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
    return true;
  }

  end(chunk?: string | Uint8Array): this {
    if (this.writableEnded) return this;
    if (chunk !== undefined) this.write(chunk);
    this.headersSent = true;
    this.writableEnded = true;
    this.writableFinished = true;
    this.emit('finish');
    this.emit('close');
    this.resolveFinished();
    return this;
  }

  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.emit('close');
    this.resolveFinished();
    return this;
  }

  result(): MemoryResponse {
    const text = this.chunks.join('');
    return { status: this.statusCode, headers: Object.fromEntries(this.headerMap), text, json: <T>() => JSON.parse(text) as T };
  }
}

export async function handleInMemory(route: RouteFunction, request: MemoryRequest): Promise<MemoryResponse> {
  const body = request.body === undefined ? '' : typeof request.body === 'string' ? request.body : JSON.stringify(request.body);
  const bytes = Buffer.from(body, 'utf8');
  const headers: Record<string, string> = {
    ...(request.body !== undefined && typeof request.body !== 'string' ? { 'content-type': 'application/json' } : {}),
    'content-length': String(bytes.length),
    ...Object.fromEntries(Object.entries(request.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
  };
  const req = Readable.from(bytes.length > 0 ? [bytes] : [], { objectMode: false }) as Readable & { headers: Record<string, string>; method: string; url: string; complete: boolean };
  req.headers = headers;
  req.method = request.method ?? 'POST';
  req.url = request.path;
  req.complete = false;
  req.once('end', () => (req.complete = true));
  const res = new MemoryServerResponse();
  await route(req as unknown as IncomingMessage, res as unknown as ServerResponse);
  await res.finished;
  return res.result();
}
