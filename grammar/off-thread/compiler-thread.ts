/**
 * A GrammarCompiler thread (compiler.ts): compiles each spec it is sent within the job's
 * CompileBudget. With a vocabulary (a worker's): IR, automaton, and the token classes of every
 * byte-reading node, sent back as the automaton plus the classes packed in one buffer. Without
 * (the frontend's check): IR and automaton, and only the verdict goes back. Keeps no compiled
 * grammars; rule classifications shared across grammars stay in this thread's bounded cache
 * until the thread is recycled.
 */
import { getHeapStatistics } from 'node:v8';
import { parentPort, workerData } from 'node:worker_threads';
import { CompileBudget } from '../budget.js';
import { GrammarError } from '../contract.js';
import { buildAutomatonFor } from '../automaton/cache.js';
import { CompiledGrammar } from '../automaton/matcher.js';
import { type PackedVocabulary, unpackVocabulary } from '../vocabulary.js';
import type { CompileJob, CompileReply } from './compiler.js';

const vocab = workerData === null ? undefined : unpackVocabulary(workerData as PackedVocabulary);

/** This thread's memory: its isolate's heap and the ArrayBuffers it holds. */
function heldBytes(): number {
  const h = getHeapStatistics();
  return h.used_heap_size + h.external_memory;
}

parentPort!.on('message', (job: CompileJob) => {
  const budget = new CompileBudget(job.limits, job.cancel, heldBytes);
  try {
    const automaton = buildAutomatonFor(job.spec, budget);
    if (vocab === undefined) {
      parentPort!.postMessage({ id: job.id, used: budget.used } satisfies CompileReply);
      return;
    }
    const g = new CompiledGrammar(automaton, vocab);
    const packed = g.exportPacked(g.unclassified(), budget);
    budget.check();
    // Transferred, not cloned: the event loop receives them without a copy.
    const buffers = new Set<ArrayBuffer>([packed]);
    for (const v of Object.values(automaton)) if (ArrayBuffer.isView(v)) buffers.add(v.buffer as ArrayBuffer);
    parentPort!.postMessage({ id: job.id, automaton, packed, used: budget.used } satisfies CompileReply, [...buffers]);
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown } | null;
    const error = {
      code: typeof e?.code === 'string' ? e.code : 'internal',
      ...(err instanceof GrammarError ? { kind: err.kind } : {}),
      message: typeof e?.message === 'string' ? e.message : String(err),
    };
    parentPort!.postMessage({ id: job.id, error, used: budget.used } satisfies CompileReply);
  }
});
