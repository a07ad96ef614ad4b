/**
 * A prefix watch on its own etcd watch stream, resilient to etcd restarts.
 *
 *   start: range(prefix) → `added` for each record, remember revision R
 *   stream from R+1     → `added` on put, `removed` on delete
 *   stream breaks       → reopen from the next unseen revision (backoff 100 ms → 1 s)
 *   history compacted   → range again, emit the difference against what we reported, resume
 *
 * We keep what we reported (key → raw value), so a resync emits exactly the changes and a
 * delete for a key we never reported is not passed on. etcd3's shared WatchManager is not used:
 * it cannot be stopped while etcd is hung, and its reconnect timer outlives `close()`.
 */
import { Range, type Etcd3, type IWatchRequest, type IWatchResponse } from 'etcd3';
import type { DiscoveryEvent, WatchHandle } from './discovery.js';
import { closeStream } from './etcd-client.js';
import { deliver } from './prefix-watchers.js';

type WatchStream = Awaited<ReturnType<Etcd3['watchClient']['watch']>>;

const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 1000;

export class EtcdPrefixWatch implements WatchHandle {
  private readonly reported = new Map<string, string>();
  private readonly range: Range;
  private nextRevision = 0n;
  private stream: WatchStream | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private backoffMs = BACKOFF_MIN_MS;
  private closed = false;

  private constructor(
    private readonly client: Etcd3,
    readonly prefix: string,
    private readonly onEvent: (event: DiscoveryEvent) => void,
    private readonly onClose: (watch: EtcdPrefixWatch) => void,
  ) {
    this.range = Range.prefix(prefix);
  }

  /** Resolves after the initial `added` events were delivered; rejects if etcd is unreachable. */
  static async start(
    client: Etcd3,
    prefix: string,
    onEvent: (event: DiscoveryEvent) => void,
    onClose: (watch: EtcdPrefixWatch) => void,
  ): Promise<EtcdPrefixWatch> {
    const watch = new EtcdPrefixWatch(client, prefix, onEvent, onClose);
    await watch.sync();
    watch.open();
    return watch;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.dropStream();
    this.onClose(this);
  }

  /** Range the prefix and report the difference from what we last reported. */
  private async sync(): Promise<void> {
    const res = await this.client.kv.range({ key: this.range.start, range_end: this.range.end });
    if (this.closed) return;
    const current = new Map<string, string>();
    for (const kv of res.kvs) current.set(kv.key.toString('utf8'), kv.value.toString('utf8'));
    for (const key of [...this.reported.keys()]) {
      if (!current.has(key)) this.report(key, undefined);
    }
    for (const [key, text] of [...current].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (this.reported.get(key) !== text) this.report(key, text);
    }
    this.nextRevision = BigInt(res.header.revision) + 1n;
  }

  private open(): void {
    if (this.closed) return;
    this.client.watchClient
      .watch()
      .then((stream) => {
        if (this.closed) {
          closeStream(stream);
          return;
        }
        this.stream = stream;
        stream.on('data', (res) => {
          if (this.stream === stream) this.handle(res);
        });
        stream.on('error', () => this.broken(stream));
        stream.on('end', () => this.broken(stream));
        const request: IWatchRequest = {
          create_request: {
            key: this.range.start,
            range_end: this.range.end,
            start_revision: this.nextRevision.toString(),
            progress_notify: true,
          },
        };
        stream.write(request);
      })
      .catch(() => this.retry(false));
  }

  private handle(res: IWatchResponse): void {
    if (res.canceled) {
      // Compacted past our revision (or etcd refused the watch): start over from a range.
      this.dropStream();
      this.retry(true);
      return;
    }
    this.backoffMs = BACKOFF_MIN_MS;
    if (res.created) return;
    if (res.events.length === 0) {
      // Progress notification: nothing below header.revision is still to come.
      this.nextRevision = maxBig(this.nextRevision, BigInt(res.header.revision) + 1n);
      return;
    }
    for (const ev of res.events) {
      const key = ev.kv.key.toString('utf8');
      this.report(key, ev.type === 'Put' ? ev.kv.value.toString('utf8') : undefined);
      this.nextRevision = maxBig(this.nextRevision, BigInt(ev.kv.mod_revision) + 1n);
    }
  }

  /** Emit one change; `text` undefined means removed. Unparseable values count as absent. */
  private report(key: string, text: string | undefined): void {
    if (this.closed) return;
    const value = text === undefined ? undefined : parseJson(text);
    if (value === undefined) {
      if (this.reported.delete(key)) deliver(this.onEvent, { type: 'removed', key });
      return;
    }
    this.reported.set(key, text!);
    deliver(this.onEvent, { type: 'added', key, value: value.parsed });
  }

  private broken(stream: WatchStream): void {
    if (this.stream !== stream) return;
    this.dropStream();
    this.retry(false);
  }

  private retry(resync: boolean): void {
    if (this.closed || this.retryTimer !== undefined) return;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (!resync) {
        this.open();
        return;
      }
      this.sync().then(
        () => this.open(),
        () => this.retry(true),
      );
    }, delay);
  }

  private dropStream(): void {
    const stream = this.stream;
    this.stream = undefined;
    if (stream !== undefined) closeStream(stream);
  }
}

function parseJson(text: string): { parsed: unknown } | undefined {
  try {
    return { parsed: JSON.parse(text) as unknown };
  } catch {
    return undefined;
  }
}

function maxBig(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
