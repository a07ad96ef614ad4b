/**
 * Classifying a new grammar's automaton off the event loop. The first time a worker meets a
 * rule structure, each of its byte-reading positions needs one walk of the whole token trie
 * (milliseconds each on a 150k vocabulary); done inline, that would stall every sequence in
 * the batch. Instead the request waits (before it joins the batch) while one thread computes
 * the classes, and the engine loop keeps stepping. Grammars already classified cost nothing.
 *
 *   prepare(spec) ── compile (automaton: fast) ── every node classified? ── yes ─▶ undefined
 *                                                       │ no
 *                                  post {spec, nodes} ──▶ thread: compile + classify + copy back
 *                                  install ◀────────────┘
 *
 * A thread failure never fails the request: the matcher then classifies what it meets lazily.
 */
import { Worker } from 'node:worker_threads';
import type { ClassifiedNode, GrammarCache, Vocabulary } from '../../grammar/index.js';
import { packVocabulary } from '../../grammar/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { threadEntry, type Logger } from '../../runtime/index.js';

export interface ClassifyJob {
  id: number;
  spec: StructuredOutputSpec;
  nodes: number[];
}

export type ClassifyReply = { id: number; classes: ClassifiedNode[] } | { id: number; error: string };

export class GrammarClassifier {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, (reply: ClassifyReply | undefined) => void>();
  private readonly inFlight = new Map<string, Promise<void>>();
  /** Grammars classified on the thread, for stats and tests. */
  classifiedOffThread = 0;

  constructor(
    private readonly vocab: Vocabulary,
    private readonly cache: GrammarCache,
    private readonly log?: Logger,
  ) {}

  /** Undefined when the grammar is ready; throws GrammarError when the spec does not compile. */
  prepare(spec: StructuredOutputSpec): Promise<void> | undefined {
    const g = this.cache.compile(spec, this.vocab);
    const nodes = g.unclassified();
    if (nodes.length === 0) return undefined;
    const key = JSON.stringify(spec);
    const running = this.inFlight.get(key);
    if (running !== undefined) return running;
    const done = this.classify(spec, nodes)
      .then((reply) => {
        if (reply === undefined) return;
        if ('error' in reply) {
          this.log?.warn({ error: reply.error }, 'structured output: off-thread classification failed; classifying lazily');
          return;
        }
        g.install(reply.classes);
        this.classifiedOffThread++;
      })
      .finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, done);
    return done;
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    for (const resolve of this.pending.values()) resolve(undefined);
    this.pending.clear();
    if (w !== undefined) await w.terminate();
  }

  private classify(spec: StructuredOutputSpec, nodes: number[]): Promise<ClassifyReply | undefined> {
    const w = this.thread();
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      w.ref();
      w.postMessage({ id, spec, nodes } satisfies ClassifyJob);
    });
  }

  private thread(): Worker {
    if (this.worker !== undefined) return this.worker;
    const entry = threadEntry(import.meta.url, 'grammar-classifier-thread');
    const w = new Worker(entry.code, { eval: entry.eval, workerData: packVocabulary(this.vocab) });
    w.on('message', (reply: ClassifyReply) => {
      const resolve = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) w.unref();
      resolve?.(reply);
    });
    const fail = (why: unknown): void => {
      this.log?.warn({ err: why }, 'structured output: the classifier thread stopped; classifying lazily');
      if (this.worker === w) this.worker = undefined;
      for (const resolve of this.pending.values()) resolve(undefined);
      this.pending.clear();
    };
    w.on('error', fail);
    w.on('exit', (code) => {
      if (this.worker === w) fail(new Error(`exit ${code}`));
    });
    w.unref();
    this.worker = w;
    return w;
  }
}
