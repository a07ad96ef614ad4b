/**
 * The grammar classifier's thread (grammar-classifier.ts): compiles each spec it is sent
 * against the worker's vocabulary and returns the token classes of the requested automaton
 * nodes. Keeps its own caches, so a rule structure it has seen is not walked again.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { GrammarCache, type PackedVocabulary, unpackVocabulary } from '../../grammar/index.js';
import type { ClassifyJob, ClassifyReply } from './grammar-classifier.js';

const vocab = unpackVocabulary(workerData as PackedVocabulary);
const cache = new GrammarCache(64);

parentPort!.on('message', (job: ClassifyJob) => {
  try {
    const g = cache.compile(job.spec, vocab);
    const { classes, transfer } = g.exportClasses(job.nodes);
    parentPort!.postMessage({ id: job.id, classes } satisfies ClassifyReply, transfer);
  } catch (err) {
    parentPort!.postMessage({ id: job.id, error: (err as Error)?.message ?? String(err) } satisfies ClassifyReply);
  }
});
