/**
 * Grammar engine cost on a real-size vocabulary (issue 16's bench): per-token mask time for
 * the JSON-schema corpus and for free JSON, and schema compile time, cold and cached.
 *
 * Run: node --import tsx bench/grammar-mask.ts [--quick] [--tokenizer tokenizer.json] [--tokens N]
 * Prints tables and writes bench/results/grammar-mask.json.
 *
 * The vocabulary is a ~150k-token byte-level BPE tokenizer.json trained by the project's BPE
 * trainer (bench/fixtures/bpe-150k.ts, cached between runs) unless --tokenizer names one.
 * Outputs come from a random model under the grammar: each step samples uniformly among the
 * allowed tokens (the worst case for a mask: strings full of long, rare tokens), switching to
 * closing mode near the token budget as the engine loop does.
 *
 *  - mask, steady: the second pass over the same seeds, every node's token classes built;
 *    what a server sees once a schema has been used.
 *  - mask, first use, classified inline: the first pass, each node classified on first visit
 *    (after the worker-start preparation: token trie and the generic JSON rules' classes). A
 *    worker does not pay this inside a step: it compiles a new grammar on a thread while the
 *    request waits (grammar/off-thread/compiler.ts), which is the cold compile below.
 *  - compile, cold: spec → IR → automaton plus classifying every byte-reading node, with the
 *    shared (cross-grammar) classes dropped first; cold (lazy): the automaton only, what the
 *    first request waits for before its first mask.
 *  - compile, cached: a GrammarCache hit.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { GrammarCache, bitmaskWords, clearSharedTokenClasses, vocabularyFromTokenizerJson, type GrammarMatcher, type Vocabulary } from '../grammar/index.js';
import type { StructuredOutputSpec } from '../proto/wire.js';
import { rng } from '../test/grammar/compile-ir-tools.js';
import { SCHEMA_CORPUS } from '../test/grammar/schema-corpus.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    tokenizer: { type: 'string' },
    tokens: { type: 'string' },
  },
});
const QUICK = args.quick === true;
/** Free tokens beyond each grammar's shortest completion (a smaller budget can only end in "length"). */
const BUDGET = Number(args.tokens ?? (QUICK ? 64 : 160));
const FREE_JSON_RUNS = QUICK ? 8 : 40;

async function loadVocab(): Promise<{ vocab: Vocabulary; source: string; trainSeconds: number | null }> {
  let path = args.tokenizer;
  let trainSeconds: number | null = null;
  if (path === undefined) {
    const { benchTokenizer150k } = await import('./fixtures/bpe-150k.js');
    const t = await benchTokenizer150k();
    path = t.path;
    trainSeconds = t.trainSeconds;
  }
  const json = JSON.parse(readFileSync(path, 'utf8')) as { added_tokens?: Array<{ id: number; content: string }> };
  const eos = (json.added_tokens ?? []).filter((t) => /endoftext|<\/s>|eos/i.test(t.content)).map((t) => t.id);
  return { vocab: vocabularyFromTokenizerJson(json, { eosTokenIds: eos }), source: path, trainSeconds };
}

interface Samples {
  steps: number[];
  outputs: number;
}

/** One random output under the grammar; pushes each fillNextTokenBitmask time (µs). */
function run(m: GrammarMatcher, vocab: Vocabulary, mask: Uint32Array, rand: () => number, budget: number, into: number[]): string {
  const bytes: number[] = [];
  let closing = false;
  const allowed = new Int32Array(vocab.size);
  for (let i = 0; i < budget; i++) {
    if (!closing) closing = budget - i <= m.maxBytesToAccept() + 1 + 16;
    const t0 = process.hrtime.bigint();
    m.fillNextTokenBitmask(mask, closing ? { closing: true } : undefined);
    into.push(Number(process.hrtime.bigint() - t0) / 1000);
    let n = 0;
    for (let w = 0; w < mask.length; w++) {
      let bits = mask[w]!;
      while (bits !== 0) {
        const low = bits & -bits;
        allowed[n++] = (w << 5) + (31 - Math.clz32(low));
        bits ^= low;
      }
    }
    if (n === 0) throw new Error(`empty mask after ${JSON.stringify(Buffer.from(bytes).toString('utf8'))}`);
    const id = allowed[Math.floor(rand() * n)]!;
    if (!m.acceptToken(id)) throw new Error(`masked token ${id} rejected`);
    if (vocab.eosTokenIds.includes(id)) break;
    bytes.push(...vocab.tokenBytes[id]!);
    if (m.isTerminated()) break;
  }
  return Buffer.from(bytes).toString('utf8');
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

function summary(xs: number[]): { n: number; p50: number; p90: number; p99: number; max: number; mean: number } {
  return { n: xs.length, p50: pct(xs, 50), p90: pct(xs, 90), p99: pct(xs, 99), max: Math.max(...xs), mean: xs.reduce((a, b) => a + b, 0) / xs.length };
}

function maskPasses(specs: StructuredOutputSpec[], vocab: Vocabulary, runsPerSpec: number, validate: (i: number, text: string) => void): { first: Samples; steady: Samples } {
  const cache = new GrammarCache(1024);
  const mask = new Uint32Array(bitmaskWords(vocab.size));
  const pass = (): Samples => {
    const steps: number[] = [];
    let outputs = 0;
    specs.forEach((spec, i) => {
      for (let r = 0; r < runsPerSpec; r++) {
        const rand = rng(1000 * i + r);
        const m = cache.matcherFor(spec, vocab);
        const text = run(m, vocab, mask, rand, m.minBytesToAccept() + 1 + BUDGET, steps);
        validate(i, text);
        outputs++;
      }
    });
    return { steps, outputs };
  };
  const first = pass();
  const steady = pass();
  return { first, steady };
}

function compileTimes(specs: StructuredOutputSpec[], vocab: Vocabulary): { coldFullMs: number[]; coldLazyMs: number[]; cachedUs: number[] } {
  const coldFullMs: number[] = [];
  const coldLazyMs: number[] = [];
  const cachedUs: number[] = [];
  for (const spec of specs) {
    clearSharedTokenClasses();
    let t0 = performance.now();
    const lazy = new GrammarCache().compile(spec, vocab);
    coldLazyMs.push(performance.now() - t0);
    clearSharedTokenClasses();
    const cache = new GrammarCache();
    t0 = performance.now();
    cache.compile(spec, vocab).classifyAll();
    coldFullMs.push(performance.now() - t0);
    t0 = performance.now();
    for (let k = 0; k < 100; k++) cache.compile(spec, vocab);
    cachedUs.push(((performance.now() - t0) * 1000) / 100);
    void lazy;
  }
  return { coldFullMs, coldLazyMs, cachedUs };
}

async function main(): Promise<void> {
  const { vocab, source, trainSeconds } = await loadVocab();
  console.log(`vocabulary: ${vocab.size} tokens (${source})${trainSeconds !== null ? `, trained in ${trainSeconds.toFixed(1)} s` : ''}`);
  const warmMs = new GrammarCache().warm(vocab);
  console.log(`vocabulary prepared (token trie, generic JSON classes) in ${warmMs.toFixed(0)} ms, as a worker does at start`);
  const corpus = QUICK ? SCHEMA_CORPUS.slice(0, 12) : SCHEMA_CORPUS;
  const schemaSpecs: StructuredOutputSpec[] = corpus.map((c) => ({ kind: 'json_schema', schema: c.schema }));
  let invalid = 0;
  const schemaMasks = maskPasses(schemaSpecs, vocab, QUICK ? 1 : 2, (_i, text) => {
    try {
      JSON.parse(text);
    } catch {
      invalid++;
    }
  });
  const freeMasks = maskPasses([{ kind: 'json_object' }], vocab, FREE_JSON_RUNS, (_i, text) => {
    try {
      JSON.parse(text);
    } catch {
      invalid++;
    }
  });
  console.log('compiling cold (every node classified) and cached...');
  const compile = compileTimes(schemaSpecs, vocab);

  const rows = [
    { case: 'JSON-schema corpus, steady', ...summary(schemaMasks.steady.steps) },
    { case: 'JSON-schema corpus, first use, classified inline', ...summary(schemaMasks.first.steps) },
    { case: 'free JSON (json_object), steady', ...summary(freeMasks.steady.steps) },
    { case: 'free JSON (json_object), first use, classified inline', ...summary(freeMasks.first.steps) },
  ];
  console.log(`\nmask time per token (µs), vocabulary ${vocab.size}, shortest completion + ${BUDGET} tokens, outputs not parsing: ${invalid}`);
  console.log('| case | tokens | p50 | p90 | p99 | max | mean |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) console.log(`| ${r.case} | ${r.n} | ${r.p50.toFixed(1)} | ${r.p90.toFixed(1)} | ${r.p99.toFixed(1)} | ${r.max.toFixed(0)} | ${r.mean.toFixed(1)} |`);
  const c = { coldFull: summary(compile.coldFullMs), coldLazy: summary(compile.coldLazyMs), cached: summary(compile.cachedUs) };
  console.log(`\ncompile, ${schemaSpecs.length} corpus schemas`);
  console.log('| phase | p50 | p90 | max | mean |');
  console.log('|---|---:|---:|---:|---:|');
  console.log(`| cold, every node classified (ms) | ${c.coldFull.p50.toFixed(1)} | ${c.coldFull.p90.toFixed(1)} | ${c.coldFull.max.toFixed(1)} | ${c.coldFull.mean.toFixed(1)} |`);
  console.log(`| cold, automaton only (ms) | ${c.coldLazy.p50.toFixed(2)} | ${c.coldLazy.p90.toFixed(2)} | ${c.coldLazy.max.toFixed(2)} | ${c.coldLazy.mean.toFixed(2)} |`);
  console.log(`| cached (µs) | ${c.cached.p50.toFixed(1)} | ${c.cached.p90.toFixed(1)} | ${c.cached.max.toFixed(1)} | ${c.cached.mean.toFixed(1)} |`);

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'grammar-mask.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    JSON.stringify(
      {
        bench: 'grammar-mask',
        date: new Date().toISOString(),
        quick: QUICK,
        vocabSize: vocab.size,
        tokenizer: source,
        tokenBudget: BUDGET,
        vocabularyPrepareMs: warmMs,
        outputsNotParsing: invalid,
        aim: { p50Us: 40, p99Us: 200 },
        maskUs: Object.fromEntries(rows.map((r) => [r.case, r])),
        compile: { coldEveryNodeMs: c.coldFull, coldAutomatonOnlyMs: c.coldLazy, cachedUs: c.cached },
      },
      null,
      2,
    ) + '\n',
  );
  console.log(`\nwrote ${out}`);
}

await main();
