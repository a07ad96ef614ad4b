/**
 * New grammars are compiled off the event loop: GrammarCompiler builds a grammar's automaton and
 * token classes on its thread (nothing classified on this one), adopts them (packed, decoded per
 * node on use), and masks then equal
 * those of a grammar classified lazily here. In the engine loop, a constrained request whose
 * grammar is still being prepared waits outside the batch while other requests run to the end.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_COMPILE_LIMITS, GrammarCache, GrammarCompiler, GrammarError, bitmaskWords, localClassifications, type Vocabulary } from '../../grammar/index.js';
import type { PreprocessedRequest, StructuredOutputSpec, TokenDelta } from '../../proto/wire.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import { workerGrammarProvider } from '../../workers/process/grammar-provider.js';
import { allowedIds, testVocabulary } from '../grammar/automaton-tools.js';
import { rng } from '../grammar/compile-ir-tools.js';

const vocab: Vocabulary = testVocabulary(['{"name":"Ada Lovelace","tags":["math","poetry"],"born":1815,"alive":false}', 'naïve café 東京 🚀'], rng(5));
const spec: StructuredOutputSpec = {
  kind: 'json_schema',
  schema: { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, tags: { type: 'array', items: { type: 'string' }, maxItems: 3 }, born: { type: 'integer', minimum: 0 } }, required: ['name', 'tags', 'born'], additionalProperties: false },
};

const cache = new GrammarCache();
const classifier = new GrammarCompiler({ limits: DEFAULT_COMPILE_LIMITS, target: { vocab, cache } });
afterAll(() => classifier.close());

describe('GrammarCompiler', () => {
  it("classifies a new grammar on its thread; the masks equal a lazily classified grammar's", async () => {
    const before = localClassifications;
    const ready = classifier.prepare(spec);
    expect(ready).toBeInstanceOf(Promise);
    expect(classifier.prepare(spec)).toBe(ready); // one job per grammar in flight
    await ready;
    expect(classifier.compiled).toBe(1);
    const g = cache.compile(spec, vocab);
    expect(g.unclassified()).toEqual([]);
    expect(localClassifications).toBe(before); // nothing walked on this thread
    expect(classifier.prepare(spec)).toBeUndefined(); // ready now

    // The same walk through both grammars, masks compared at every step.
    const lazy = new GrammarCache().compile(spec, vocab).matcher();
    const offThread = g.matcher();
    const a = new Uint32Array(bitmaskWords(vocab.size));
    const b = new Uint32Array(bitmaskWords(vocab.size));
    const rand = rng(9);
    for (let step = 0; step < 60 && !offThread.isTerminated(); step++) {
      const closing = step > 30;
      offThread.fillNextTokenBitmask(a, closing ? { closing } : undefined);
      lazy.fillNextTokenBitmask(b, closing ? { closing } : undefined);
      expect(Array.from(a)).toEqual(Array.from(b));
      const ids = allowedIds(a, vocab.size);
      const id = ids[Math.floor(rand() * ids.length)]!;
      expect(offThread.acceptToken(id)).toBe(true);
      expect(lazy.acceptToken(id)).toBe(true);
    }
  });

  it('a spec that does not compile rejects, naming the problem', async () => {
    await expect(classifier.prepare({ kind: 'json_schema', schema: { type: 'array', uniqueItems: true } })).rejects.toThrow(GrammarError);
    await expect(classifier.prepare({ kind: 'json_schema', schema: { type: 'array', uniqueItems: true } })).rejects.toThrow(/uniqueItems/);
  });

  it('a compile past its time budget rejects naming the budget; an abandoned one is cancelled', async () => {
    const tight = new GrammarCompiler({ limits: { timeoutMs: 50, memoryBytes: 1 << 30 }, target: { vocab, cache: new GrammarCache() } });
    const big = { kind: 'regex', pattern: '(' + Array.from({ length: 400 }, (_, i) => `[a-z]{${i % 40}}q${i}`).join('|') + ')' } as const;
    await expect(tight.prepare(big)).rejects.toThrow(/time budget of 50 ms/);
    const controller = new AbortController();
    const waiting = tight.prepare({ ...big, pattern: big.pattern + 'x' }, controller.signal)!;
    controller.abort();
    await waiting;
    await expect.poll(() => tight.cancelled).toBe(1);
    await tight.close();
    const small = new GrammarCompiler({ limits: { timeoutMs: 10_000, memoryBytes: 4096 }, target: { vocab, cache: new GrammarCache() } });
    await expect(small.prepare(big)).rejects.toThrow(/memory budget of 0 MB/);
    await small.close();
  });
});

describe('EngineLoop with a grammar being prepared', () => {
  it('runs other requests to the end while a constrained request waits for its grammar', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const provider = workerGrammarProvider(vocab, cache, { prepare: () => gate });
    const engine = new MockerEngine({ numBlocks: 256, blockSize: 16, vocabSize: vocab.size, speedupRatio: 1e6, eosTokenIds: vocab.eosTokenIds });
    const loop = new EngineLoop({ engine, grammar: provider });
    const req = (id: string, structured?: StructuredOutputSpec): PreprocessedRequest => ({
      requestId: id,
      model: 'toy',
      tokenIds: [1, 2, 3],
      sampling: {},
      stop: { maxTokens: structured ? 200 : 20, stopTokenIds: [], ignoreEos: true },
      ...(structured ? { structured } : {}),
    });
    const collect = async (r: PreprocessedRequest, onDelta?: () => void): Promise<TokenDelta[]> => {
      const out: TokenDelta[] = [];
      for await (const d of loop.generate(r, new AbortController().signal)) {
        out.push(d);
        onDelta?.();
      }
      return out;
    };
    let constrainedDeltas = 0;
    const constrained = collect(req('c', spec), () => constrainedDeltas++);
    const free = await collect(req('f'));
    expect(free.flatMap((d) => d.tokenIds)).toHaveLength(20);
    // Still waiting for its grammar: not one token yet, and it never held the other back.
    expect(constrainedDeltas).toBe(0);
    expect(loop.structured!.size).toBe(0);
    release();
    const out = await constrained;
    const text = Buffer.from(out.flatMap((d) => d.tokenIds).filter((id) => !vocab.eosTokenIds.includes(id)).flatMap((id) => [...vocab.tokenBytes[id]!])).toString('utf8');
    expect(JSON.parse(text)).toHaveProperty('tags');
    expect(out[out.length - 1]!.finishReason).toBe('stop');
    await loop.close();
  });
});
