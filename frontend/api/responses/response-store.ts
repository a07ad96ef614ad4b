/**
 * The Responses API's conversation state: each stored response (for `GET /v1/responses/{id}`)
 * and the conversation that led to it, as chat messages (for `previous_response_id`), in one
 * bounded map — the code base's LruMap by entries (`--responses-store-size`), each entry also
 * expiring `--responses-store-ttl` after it was written. Responses still generating are
 * tracked separately, so `/cancel` can end them. Memory only: a restarted frontend forgets.
 */
import { LruMap } from '../../../runtime/lru.js';

export interface StoredResponse {
  /** The response object as the API returns it. */
  response: Record<string, unknown>;
  /** The conversation through this response's output, as chat messages (instructions excluded, as OpenAI does). */
  conversation: readonly Record<string, unknown>[];
  expiresAt: number;
}

export interface ResponseStoreOptions {
  maxEntries: number;
  ttlMs: number;
}

export const RESPONSE_STORE_DEFAULTS: ResponseStoreOptions = { maxEntries: 1000, ttlMs: 3_600_000 };

interface Running {
  snapshot: () => Record<string, unknown>;
  cancel: () => void;
}

export class ResponseStore {
  private readonly entries: LruMap<string, StoredResponse>;
  private readonly running = new Map<string, Running>();

  constructor(
    readonly options: ResponseStoreOptions = RESPONSE_STORE_DEFAULTS,
    private readonly now: () => number = Date.now,
  ) {
    this.entries = new LruMap({ maxEntries: options.maxEntries });
  }

  get size(): number {
    return this.entries.size;
  }

  put(id: string, response: Record<string, unknown>, conversation: readonly Record<string, unknown>[]): void {
    this.entries.set(id, { response, conversation, expiresAt: this.now() + this.options.ttlMs });
  }

  get(id: string): StoredResponse | undefined {
    const entry = this.entries.get(id);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.entries.delete(id);
      return undefined;
    }
    return entry;
  }

  delete(id: string): boolean {
    const known = this.get(id) !== undefined;
    this.entries.delete(id);
    return known;
  }

  /** A response now generating; the returned function ends the tracking. */
  begin(id: string, snapshot: () => Record<string, unknown>, cancel: () => void): () => void {
    this.running.set(id, { snapshot, cancel });
    return () => {
      this.running.delete(id);
    };
  }

  /** Cancel a generating response: its snapshot at the cancel, or undefined when it is not generating. */
  cancel(id: string): Record<string, unknown> | undefined {
    const run = this.running.get(id);
    if (run === undefined) return undefined;
    this.running.delete(id);
    run.cancel();
    return { ...run.snapshot(), status: 'cancelled' };
  }

  /** The response as it stands while it generates. */
  inProgress(id: string): Record<string, unknown> | undefined {
    return this.running.get(id)?.snapshot();
  }
}
