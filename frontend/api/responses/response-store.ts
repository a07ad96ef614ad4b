/**
 * The Responses API's conversation state: each stored response (for `GET /v1/responses/{id}`)
 * and the conversation that led to it, as chat messages (for `previous_response_id`), in one
 * bounded map — the code base's LruMap by entries (`--responses-store-size`), each entry also
 * expiring `--responses-store-ttl` after it was written. Responses still generating are
 * tracked separately, so `/cancel` can end them. Memory only: a restarted frontend forgets.
 *
 * Every entry belongs to the caller that made it (`owner`: a digest of its API key, from
 * `http/auth.ts` `callerScope`; one shared owner when the frontend has no keys). Another
 * caller's response is not there for you: retrieve, chain, cancel and delete all answer as for
 * an unknown id, so a key learns nothing of the ids of others.
 */
import { LruMap } from '../../../runtime/lru.js';

export interface StoredResponse {
  /** Who made it (callerScope); only they may read, chain from, cancel or delete it. */
  owner: string;
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
  owner: string;
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

  put(id: string, owner: string, response: Record<string, unknown>, conversation: readonly Record<string, unknown>[]): void {
    this.entries.set(id, { owner, response, conversation, expiresAt: this.now() + this.options.ttlMs });
  }

  /** The stored response `id` if `owner` made it (and it has not expired). */
  get(id: string, owner: string): StoredResponse | undefined {
    const entry = this.entries.get(id);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.entries.delete(id);
      return undefined;
    }
    return entry.owner === owner ? entry : undefined;
  }

  delete(id: string, owner: string): boolean {
    if (this.get(id, owner) === undefined) return false;
    this.entries.delete(id);
    return true;
  }

  /** A response now generating; the returned function ends the tracking. */
  begin(id: string, owner: string, snapshot: () => Record<string, unknown>, cancel: () => void): () => void {
    this.running.set(id, { owner, snapshot, cancel });
    return () => {
      this.running.delete(id);
    };
  }

  /** Cancel a generating response of `owner`: its snapshot at the cancel, or undefined when it is not generating (or not theirs). */
  cancel(id: string, owner: string): Record<string, unknown> | undefined {
    const run = this.running.get(id);
    if (run === undefined || run.owner !== owner) return undefined;
    this.running.delete(id);
    run.cancel();
    return { ...run.snapshot(), status: 'cancelled' };
  }

  /** The response as it stands while it generates, to its owner. */
  inProgress(id: string, owner: string): Record<string, unknown> | undefined {
    const run = this.running.get(id);
    return run !== undefined && run.owner === owner ? run.snapshot() : undefined;
  }
}
