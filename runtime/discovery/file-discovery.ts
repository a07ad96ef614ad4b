/**
 * File discovery: records are JSON files in one directory (see file-records.ts), heartbeats are
 * mtimes, and a record whose mtime is older than its writer's TTL is gone. For one machine
 * without etcd (`runtime up`).
 *
 * Watching combines fs.watch (fast, but it drops events and does not fire when a record merely
 * ages out) with a poll every `pollIntervalMs`. One scanner per handle serves all its watches;
 * it keeps the last view and emits the difference. Scans, watch attach and close run one at a
 * time, so a new watcher's snapshot and the live stream that follows never overlap or gap.
 */
import { watch as fsWatch, type FSWatcher } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InstanceId } from '../../proto/wire.js';
import type { Discovery, DiscoveryEvent, DiscoveryKind, DiscoveryRecord, WatchHandle } from './discovery.js';
import { LeaseLostError } from './errors.js';
import {
  type FileEntry,
  isExpired,
  isNotFound,
  removeRecord,
  scanRecords,
  touchRecord,
  unlinkQuiet,
  writeRecord,
} from './file-records.js';
import { DiscoveryHandleState } from './handle-state.js';
import { randomInstanceId } from './instance-id.js';
import { PrefixWatchers, cloneJson, compareKeys, deliver } from './prefix-watchers.js';
import { SerialQueue } from './serial-queue.js';

export interface FileDiscoveryOptions {
  /** Directory of records; created if missing (default `$TMPDIR/tandem-discovery`). */
  directory?: string;
  /** Record TTL in seconds (default 10). Heartbeats run every TTL/3. */
  ttlSeconds?: number;
  /** Poll period for watchers (default 300 ms). */
  pollIntervalMs?: number;
}

export const DEFAULT_FILE_DIRECTORY = join(tmpdir(), 'tandem-discovery');

/** Files expired this many TTLs ago are deleted by whichever process scans them. */
const GC_AFTER_TTLS = 3;

export class FileDiscovery implements Discovery {
  readonly kind: DiscoveryKind = 'file';
  readonly instanceId: InstanceId = randomInstanceId();
  readonly directory: string;
  private readonly ttlMs: number;
  private readonly ttlSeconds: number;
  private readonly pollIntervalMs: number;
  /** Records this process owns: key → value, rewritten if a file disappears. */
  private readonly owned = new Map<string, unknown>();
  private readonly watchers = new PrefixWatchers();
  private readonly state = new DiscoveryHandleState(
    this.kind,
    (cause) => new LeaseLostError('file heartbeat could not be refreshed', { cause }),
  );
  private lastRefreshMs = Date.now();
  private heartbeat: NodeJS.Timeout | undefined;
  /** Serializes mutations, heartbeats, scans and watch attach. */
  private readonly queue = new SerialQueue();
  private view = new Map<string, FileEntry>();
  private poll: NodeJS.Timeout | undefined;
  private dirWatcher: FSWatcher | undefined;
  private scanQueued = false;

  private constructor(options: FileDiscoveryOptions) {
    this.directory = options.directory ?? DEFAULT_FILE_DIRECTORY;
    this.ttlSeconds = options.ttlSeconds ?? 10;
    if (!(this.ttlSeconds > 0)) throw new RangeError(`ttlSeconds must be > 0, got ${this.ttlSeconds}`);
    this.ttlMs = this.ttlSeconds * 1000;
    this.pollIntervalMs = options.pollIntervalMs ?? 300;
  }

  static async open(options: FileDiscoveryOptions = {}): Promise<FileDiscovery> {
    const discovery = new FileDiscovery(options);
    await mkdir(discovery.directory, { recursive: true });
    discovery.heartbeat = setInterval(() => void discovery.refresh(), discovery.ttlMs / 3);
    discovery.heartbeat.unref();
    return discovery;
  }

  async put(key: string, value: unknown): Promise<void> {
    this.state.assertUsable();
    const stored = cloneJson(value);
    await this.queue.run(async () => {
      this.state.assertUsable();
      await writeRecord(this.directory, { key, instanceId: this.instanceId, ttlSeconds: this.ttlSeconds, value: stored });
      this.owned.set(key, stored);
    });
    this.requestScan();
  }

  async delete(key: string): Promise<void> {
    this.state.assertOpen();
    await this.queue.run(async () => {
      if (!this.owned.delete(key)) return;
      await removeRecord(this.directory, key);
    });
    this.requestScan();
  }

  async list<T = unknown>(prefix: string): Promise<Array<DiscoveryRecord<T>>> {
    this.state.assertOpen();
    const now = Date.now();
    const entries = await scanRecords(this.directory, prefix);
    return entries
      .filter((e) => !isExpired(e, now))
      .map((e) => ({ key: e.key, value: e.envelope.value as T }))
      .sort(compareKeys);
  }

  async watch<T = unknown>(prefix: string, onEvent: (event: DiscoveryEvent<T>) => void): Promise<WatchHandle> {
    this.state.assertOpen();
    const handler = onEvent as (event: DiscoveryEvent) => void;
    return this.queue.run(async () => {
      this.state.assertOpen();
      await this.scan();
      const initial = [...this.view.values()].filter((e) => e.key.startsWith(prefix)).sort(compareKeys);
      for (const e of initial) deliver(handler, { type: 'added', key: e.key, value: cloneJson(e.envelope.value) });
      const handle = this.watchers.add(prefix, handler, () => {
        if (this.watchers.size === 0) this.stopWatching();
      });
      this.startWatching();
      return handle;
    });
  }

  onLeaseLost(callback: (cause: Error) => void): void {
    this.state.onLeaseLost(callback);
  }

  async close(): Promise<void> {
    if (!this.state.close()) return;
    clearInterval(this.heartbeat);
    this.watchers.closeAll();
    this.stopWatching();
    await this.queue.run(async () => {
      const keys = [...this.owned.keys()];
      this.owned.clear();
      await Promise.all(keys.map((key) => removeRecord(this.directory, key).catch(() => undefined)));
    });
  }

  /** Heartbeat: touch every owned file; rewrite any that vanished. */
  private refresh(): Promise<void> {
    return this.queue.run(async () => {
      if (this.state.closed || this.state.lost) return;
      const started = Date.now();
      // A process that registered nothing (a frontend) has no records to lose: a busy event
      // loop must not end it.
      if (this.owned.size === 0) {
        this.lastRefreshMs = started;
        return;
      }
      // A process frozen past its TTL was already seen as gone; coming back would be a zombie.
      if (started - this.lastRefreshMs > this.ttlMs) {
        this.leaseLost(new LeaseLostError(`file heartbeat not refreshed for ${started - this.lastRefreshMs} ms (ttl ${this.ttlMs} ms)`));
        return;
      }
      const at = new Date(started);
      try {
        for (const [key, value] of this.owned) {
          try {
            await touchRecord(this.directory, key, at);
          } catch (err) {
            if (!isNotFound(err)) throw err;
            await mkdir(this.directory, { recursive: true });
            await writeRecord(this.directory, { key, instanceId: this.instanceId, ttlSeconds: this.ttlSeconds, value });
          }
        }
        this.lastRefreshMs = started;
      } catch {
        // Retried next tick; the check above declares loss once it has failed for a TTL.
      }
    });
  }

  private leaseLost(cause: Error): void {
    if (!this.state.markLost(cause)) return;
    clearInterval(this.heartbeat);
    const keys = [...this.owned.keys()];
    this.owned.clear();
    // Best effort: remove what we can so readers need not wait for the mtime to age out.
    void Promise.all(keys.map((key) => removeRecord(this.directory, key).catch(() => undefined)));
  }

  private startWatching(): void {
    if (this.poll !== undefined) return;
    this.poll = setInterval(() => this.requestScan(), this.pollIntervalMs);
    this.poll.unref();
    try {
      this.dirWatcher = fsWatch(this.directory, { persistent: false }, () => this.requestScan());
      this.dirWatcher.on('error', () => {
        this.dirWatcher?.close();
        this.dirWatcher = undefined;
      });
    } catch {
      // fs.watch unsupported here: the poll alone keeps watchers correct, just slower.
    }
  }

  private stopWatching(): void {
    clearInterval(this.poll);
    this.poll = undefined;
    this.dirWatcher?.close();
    this.dirWatcher = undefined;
  }

  /** Coalesce bursts of fs events and poll ticks into at most one queued scan. */
  private requestScan(): void {
    if (this.scanQueued || this.watchers.size === 0 || this.state.closed) return;
    this.scanQueued = true;
    void this.queue.run(async () => {
      this.scanQueued = false;
      if (this.watchers.size > 0 && !this.state.closed) await this.scan();
    });
  }

  /** Read the directory, diff against the last view, emit the changes. Runs inside the queue. */
  private async scan(): Promise<void> {
    const now = Date.now();
    let entries: FileEntry[];
    try {
      entries = await scanRecords(this.directory, '', this.view);
    } catch {
      return; // transient (e.g. directory being recreated); the next poll retries
    }
    const next = new Map<string, FileEntry>();
    for (const entry of entries) {
      if (!isExpired(entry, now)) {
        next.set(entry.key, entry);
      } else if (now - entry.mtimeMs > GC_AFTER_TTLS * entry.envelope.ttlSeconds * 1000 && !this.owned.has(entry.key)) {
        await unlinkQuiet(entry.path).catch(() => undefined);
      }
    }
    const previous = this.view;
    this.view = next;
    for (const key of previous.keys()) {
      if (!next.has(key)) this.watchers.emit({ type: 'removed', key });
    }
    for (const [key, entry] of next) {
      const before = previous.get(key);
      if (before === undefined || before.text !== entry.text) {
        this.watchers.emit({ type: 'added', key, value: cloneJson(entry.envelope.value) });
      }
    }
  }
}
