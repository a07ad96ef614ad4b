/**
 * The watcher bookkeeping shared by the memory and file backends: a set of (prefix, callback)
 * subscriptions and ordered, exception-safe delivery. A throwing callback must not stop other
 * watchers or the backend's scan loop, so errors are rethrown on a fresh task.
 */
import { TandemError } from '../errors.js';
import type { DiscoveryEvent, WatchHandle } from './discovery.js';

interface Subscription {
  prefix: string;
  onEvent: (event: DiscoveryEvent) => void;
  open: boolean;
}

export class PrefixWatchers {
  private readonly subs = new Set<Subscription>();

  get size(): number {
    return this.subs.size;
  }

  /** Register; `onClose` runs once when the handle closes (e.g. to stop a poll loop). */
  add(prefix: string, onEvent: (event: DiscoveryEvent) => void, onClose?: () => void): WatchHandle {
    const sub: Subscription = { prefix, onEvent, open: true };
    this.subs.add(sub);
    return {
      close: () => {
        if (!sub.open) return;
        sub.open = false;
        this.subs.delete(sub);
        onClose?.();
      },
    };
  }

  /** Deliver to every open watcher whose prefix matches the event's key. */
  emit(event: DiscoveryEvent): void {
    for (const sub of this.subs) {
      if (sub.open && event.key.startsWith(sub.prefix)) deliver(sub.onEvent, event);
    }
  }

  closeAll(): void {
    for (const sub of this.subs) sub.open = false;
    this.subs.clear();
  }
}

export function deliver<T>(onEvent: (event: DiscoveryEvent<T>) => void, event: DiscoveryEvent<T>): void {
  try {
    onEvent(event);
  } catch (err) {
    setImmediate(() => {
      throw err;
    });
  }
}

/** JSON round trip: every backend hands out values as a remote reader would see them. */
export function cloneJson<T>(value: unknown): T {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TandemError('invalid_argument', 'discovery values must be JSON-serializable');
  return JSON.parse(text) as T;
}

export function compareKeys(a: { key: string }, b: { key: string }): number {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}
