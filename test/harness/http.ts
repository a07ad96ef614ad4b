/**
 * Reading a serving stack from the outside: Prometheus scrapes, strict SSE parsing, token ids
 * from logprobs, and a bounded poll. Shared by the process-level suites (test/e2e,
 * test/disagg-e2e) and anything else that talks to a real frontend or worker status server.
 */

export async function scrape(baseUrl: string): Promise<string> {
  const res = await fetch(`${baseUrl}/metrics`);
  if (!res.ok) throw new Error(`GET ${baseUrl}/metrics answered ${res.status}`);
  return res.text();
}

/**
 * The value of one Prometheus sample, summed over the series whose labels include `labels`.
 * Undefined when no series matches, so a renamed metric fails the test instead of reading 0.
 * It is the shipped reader (runtime/prom-text.ts), so tests read metrics as the planner does.
 */
export { promSum as metricValue } from '../../runtime/prom-text.js';

export async function pollUntil(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 10_000, stepMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await predicate()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${String(lastError)})` : ''}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** One parsed SSE stream from the frontend: `data:` payloads as JSON, and whether [DONE] came. */
export interface SseResult {
  chunks: Array<Record<string, unknown>>;
  done: boolean;
}

/**
 * Read an SSE response body frame by frame, calling `onChunk` for each JSON payload (it may be
 * async, e.g. to kill a worker mid-stream). Checks the framing strictly.
 */
export async function readSse(res: Response, onChunk?: (chunk: Record<string, unknown>, index: number) => void | Promise<void>): Promise<SseResult> {
  const chunks: Array<Record<string, unknown>> = [];
  let done = false;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!frame.startsWith('data: ')) throw new Error(`bad SSE frame: ${JSON.stringify(frame)}`);
      const data = frame.slice('data: '.length);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      if (done) throw new Error('SSE data after [DONE]');
      const chunk = JSON.parse(data) as Record<string, unknown>;
      chunks.push(chunk);
      await onChunk?.(chunk, chunks.length - 1);
    }
  }
  if (buffer.length > 0) throw new Error(`SSE body ended mid-frame: ${JSON.stringify(buffer)}`);
  return { chunks, done };
}

/** Token ids from completions chunks requested with logprobs + return_tokens_as_token_ids. */
export function tokenIdsOf(chunks: Array<Record<string, unknown>>): number[] {
  const ids: number[] = [];
  for (const chunk of chunks) {
    const choices = (chunk.choices ?? []) as Array<{ logprobs?: { tokens?: string[] } | null }>;
    for (const choice of choices) {
      for (const token of choice.logprobs?.tokens ?? []) {
        const match = /^token_id:(\d+)$/.exec(token);
        if (!match) throw new Error(`logprob token is not token_id:N: ${token}`);
        ids.push(Number(match[1]));
      }
    }
  }
  return ids;
}
