/**
 * `LoadFeed`: the workers' `load_metrics` for one process, one event-plane subscription per
 * worker component however many readers it has. A frontend in kv mode has two readers of the
 * same topic (its embedded KV router and its dashboard); each used to subscribe on its own, so
 * every report crossed the wire and was decoded twice.
 *
 * Readers get reports that passed the one shape check here (an object with a string
 * `workerId`); what a report means (freshness, membership) is each reader's business.
 */
import { TOPICS, type LoadMetrics } from '../../proto/wire.js';
import type { DistributedRuntime, Logger, Subscription } from '../../runtime/index.js';

/** Called for every report of the component; must be cheap and must not throw. */
export type LoadListener = (report: LoadMetrics, source: string) => void;

interface Topic {
  listeners: Set<LoadListener>;
  subscription: Promise<Subscription>;
}

export class LoadFeed {
  private readonly topics = new Map<string, Topic>();
  private closed = false;

  constructor(
    private readonly runtime: DistributedRuntime,
    private readonly namespace: string,
    private readonly log: Logger = runtime.logger,
  ) {}

  /**
   * Hear `component`'s reports; resolves once the subscription is open, with the function that
   * stops this listener. The first listener of a component opens its subscription; a failed open
   * is retried by the next caller.
   */
  async listen(component: string, listener: LoadListener): Promise<() => void> {
    if (this.closed) throw new Error('load feed is closed');
    let topic = this.topics.get(component);
    if (topic === undefined) {
      const listeners = new Set<LoadListener>();
      const subscription = this.runtime
        .namespace(this.namespace)
        .component(component)
        .subscribe<unknown>(TOPICS.loadMetrics, (e) => {
          const m = e.payload as LoadMetrics | null;
          if (typeof m !== 'object' || m === null || typeof m.workerId !== 'string') return;
          for (const l of listeners) {
            try {
              l(m, e.source);
            } catch (err) {
              this.log.debug({ err, component }, 'load listener failed');
            }
          }
        });
      topic = { listeners, subscription };
      this.topics.set(component, topic);
      const opened = topic;
      subscription.catch(() => {
        if (this.topics.get(component) === opened) this.topics.delete(component);
      });
    }
    topic.listeners.add(listener);
    try {
      await topic.subscription;
    } catch (err) {
      topic.listeners.delete(listener);
      throw err;
    }
    const listeners = topic.listeners;
    return () => listeners.delete(listener);
  }

  /** Components with an open (or opening) subscription. */
  components(): string[] {
    return [...this.topics.keys()];
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const subs = await Promise.allSettled([...this.topics.values()].map((t) => t.subscription));
    this.topics.clear();
    await Promise.all(subs.map((r) => (r.status === 'fulfilled' ? r.value.close().catch(() => undefined) : undefined)));
  }
}
