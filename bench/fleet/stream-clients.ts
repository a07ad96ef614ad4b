/**
 * Two lean streaming clients for the same generation, so a bench can compare the paths in one
 * run: through the frontend (HTTP + SSE, `/v1/completions` with a token-id prompt, so the
 * frontend does no tokenizing the direct path skips) and straight to a worker's gRPC generate
 * endpoint with the PreprocessedRequest the frontend would build. Both time the first token
 * the same way: when the first bytes carrying a token are read.
 *
 * They are deliberately cheaper than `runtime bench`'s SseClient: no JSON parse per chunk, so
 * at tens of thousands of tokens per second the client is not what is being measured.
 */
import { Agent, request as httpRequest } from 'node:http';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { EndpointClient } from '../../runtime/endpoint-client.js';
import { createDiscovery } from '../../runtime/discovery/index.js';
import type { Discovery } from '../../runtime/discovery/index.js';
import { GrpcRequestPlaneClient } from '../../runtime/request-plane/index.js';
import type { Fleet } from './fleet.js';

export interface StreamSample {
  ok: boolean;
  /** Send → first token read, ms. */
  ttftMs: number;
  /** Send → stream end, ms. */
  e2eMs: number;
  tokens: number;
  /** SSE events / gRPC deltas that carried tokens (tokens / chunks = coalescing). */
  chunks: number;
  error?: string;
}

export interface StreamJob {
  tokenIds: number[];
  maxTokens: number;
  /** Request seed: fixes the mocker's tokens, so both paths generate the same ones. */
  seed: number;
}

export interface StreamClient {
  readonly name: string;
  stream(job: StreamJob): Promise<StreamSample>;
  close(): Promise<void>;
}

const DATA = Buffer.from('data: ');
const USAGE = /"completion_tokens":(\d+)/;

/** HTTP/SSE through the frontend. Tokens come from the final usage chunk (include_usage). */
export class FrontendStreamClient implements StreamClient {
  readonly name = 'frontend';
  private readonly agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  private readonly target: URL;

  constructor(
    url: string,
    private readonly model: string,
  ) {
    this.target = new URL('/v1/completions', url);
  }

  stream(job: StreamJob): Promise<StreamSample> {
    const body = JSON.stringify({ model: this.model, prompt: job.tokenIds, max_tokens: job.maxTokens, seed: job.seed, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    return new Promise((resolve) => {
      const start = performance.now();
      let ttft = -1;
      let events = 0;
      let tail = '';
      const fail = (error: string) => resolve({ ok: false, ttftMs: ttft, e2eMs: performance.now() - start, tokens: 0, chunks: events, error });
      const req = httpRequest(this.target, { method: 'POST', agent: this.agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          res.on('end', () => fail(`http ${res.statusCode}`));
          return;
        }
        res.on('data', (chunk: Buffer) => {
          if (ttft < 0) ttft = performance.now() - start;
          for (let i = chunk.indexOf(DATA); i !== -1; i = chunk.indexOf(DATA, i + DATA.length)) events++;
          // Only the end matters: the usage chunk and [DONE]. Keep a short rolling tail.
          tail = (tail + chunk.toString('latin1')).slice(-2048);
        });
        res.on('end', () => {
          const e2e = performance.now() - start;
          const usage = USAGE.exec(tail.slice(tail.lastIndexOf('"usage"')));
          if (!tail.includes('[DONE]') || !usage) return fail('stream ended without usage and [DONE]');
          // The finish event, the usage event and [DONE] carry no token text.
          resolve({ ok: true, ttftMs: ttft, e2eMs: e2e, tokens: Number(usage[1]), chunks: Math.max(1, events - 3) });
        });
      });
      req.on('error', (err) => fail(err.message));
      req.end(body);
    });
  }

  async close(): Promise<void> {
    this.agent.destroy();
  }
}

/** gRPC straight to the fleet's workers (round-robin over them), as the frontend calls them. */
export class DirectStreamClient implements StreamClient {
  readonly name = 'direct';
  private counter = 0;

  private constructor(
    private readonly discovery: Discovery,
    private readonly grpc: GrpcRequestPlaneClient,
    private readonly endpoint: EndpointClient,
    private readonly model: string,
  ) {}

  /** Find the fleet's workers through its own discovery directory. */
  static async open(fleet: Fleet, component = 'backend'): Promise<DirectStreamClient> {
    if (fleet.discoveryDir === undefined) throw new Error('DirectStreamClient: only file-discovery fleets are supported');
    const discovery = await createDiscovery('file', { directory: fleet.discoveryDir, pollIntervalMs: 100 });
    const grpc = new GrpcRequestPlaneClient();
    const endpoint = await EndpointClient.open({ namespace: fleet.namespace, component, endpoint: 'generate' }, discovery, grpc);
    await endpoint.waitForInstances(fleet.workers.length, 10_000);
    return new DirectStreamClient(discovery, grpc, endpoint, fleet.model);
  }

  async stream(job: StreamJob): Promise<StreamSample> {
    const request: PreprocessedRequest = {
      requestId: `direct-${process.pid}-${++this.counter}`,
      model: this.model,
      tokenIds: job.tokenIds,
      sampling: { seed: job.seed },
      stop: { maxTokens: job.maxTokens, stopTokenIds: [], ignoreEos: true },
    };
    const start = performance.now();
    let ttft = -1;
    let tokens = 0;
    let chunks = 0;
    try {
      for await (const delta of this.endpoint.generate<PreprocessedRequest, TokenDelta>(request, { requestId: request.requestId })) {
        const n = delta.tokenIds.length;
        if (n === 0) continue;
        if (ttft < 0) ttft = performance.now() - start;
        tokens += n;
        chunks++;
        // No `break` on finishReason: leaving the loop early cancels the call, which sends an
        // RST_STREAM, and Node's HTTP/2 rapid-reset guard (nghttp2: burst 1000, 33/s) then
        // closes the whole session with INTERNAL_ERROR, failing every stream on it.
      }
    } catch (err) {
      return { ok: false, ttftMs: ttft, e2eMs: performance.now() - start, tokens, chunks, error: (err as Error).message };
    }
    return { ok: tokens === job.maxTokens, ttftMs: ttft, e2eMs: performance.now() - start, tokens, chunks, ...(tokens === job.maxTokens ? {} : { error: `got ${tokens} tokens` }) };
  }

  async close(): Promise<void> {
    this.endpoint.close();
    this.grpc.close();
    await this.discovery.close();
  }
}
