/**
 * In-process fan-out behind the `Subscribe` method: each subscriber stream gets a bounded
 * queue that the stream pump drains. Publishing never waits on a subscriber; when a
 * subscriber's queue is full the newest event is dropped and counted (events are
 * fire-and-forget; consumers that need every event, like the KV indexer, detect gaps by id).
 */

export const DEFAULT_TOPIC_QUEUE_LIMIT = 16_384;

/** Bounded single-consumer queue that is also the pump's source iterator. */
export class TopicQueue implements AsyncIterator<unknown> {
  private items: unknown[] = [];
  private head = 0;
  private waiting: ((result: IteratorResult<unknown>) => void) | undefined;
  private closed = false;
  dropped = 0;

  constructor(
    readonly topic: string,
    private readonly limit: number,
    private readonly onClose: (queue: TopicQueue) => void,
  ) {}

  get length(): number {
    return this.items.length - this.head;
  }

  /** False when the event was dropped because the subscriber is too far behind. */
  push(item: unknown): boolean {
    if (this.closed) return false;
    if (this.waiting) {
      const resolve = this.waiting;
      this.waiting = undefined;
      resolve({ value: item, done: false });
      return true;
    }
    if (this.length >= this.limit) {
      this.dropped += 1;
      return false;
    }
    this.items.push(item);
    return true;
  }

  next(): Promise<IteratorResult<unknown>> {
    if (this.head < this.items.length) {
      const value = this.items[this.head];
      this.items[this.head] = undefined;
      this.head += 1;
      if (this.head === this.items.length) {
        this.items = [];
        this.head = 0;
      } else if (this.head > 1024 && this.head * 2 > this.items.length) {
        this.items = this.items.slice(this.head);
        this.head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.closed) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  return(): Promise<IteratorResult<unknown>> {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.items = [];
    this.head = 0;
    this.onClose(this);
    const resolve = this.waiting;
    this.waiting = undefined;
    resolve?.({ value: undefined, done: true });
  }
}

export class TopicHub {
  private readonly queues = new Map<string, Set<TopicQueue>>();
  /** Events dropped because a subscriber's queue was full, over the hub's life. */
  dropped = 0;

  constructor(private readonly queueLimit = DEFAULT_TOPIC_QUEUE_LIMIT) {}

  open(topic: string): TopicQueue {
    const queue = new TopicQueue(topic, this.queueLimit, (q) => this.remove(q));
    let set = this.queues.get(topic);
    if (!set) {
      set = new Set();
      this.queues.set(topic, set);
    }
    set.add(queue);
    return queue;
  }

  /** Deliver to every current subscriber of `topic`; returns how many accepted it. */
  publish(topic: string, item: unknown): number {
    const set = this.queues.get(topic);
    if (!set) return 0;
    let accepted = 0;
    for (const queue of set) {
      if (queue.push(item)) accepted += 1;
      else this.dropped += 1;
    }
    return accepted;
  }

  subscriberCount(topic: string): number {
    return this.queues.get(topic)?.size ?? 0;
  }

  closeAll(): void {
    for (const set of [...this.queues.values()]) for (const queue of [...set]) queue.close();
  }

  private remove(queue: TopicQueue): void {
    const set = this.queues.get(queue.topic);
    if (!set) return;
    set.delete(queue);
    if (set.size === 0) this.queues.delete(queue.topic);
  }
}
