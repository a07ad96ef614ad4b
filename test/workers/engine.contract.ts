/**
 * The contract every Engine passes (mocker, native). A runner calls
 * `engineContract(name, harness)`; `harness().open()` gives a fresh engine with the given pool.
 *
 * Two layers, because the Engine interface promises less than a worker does:
 *   - step semantics, on hand-built batches: one token per sampling sequence in batch order,
 *     greedy determinism, decode continuing a prefill, prefix hits (a table that reuses
 *     another sequence's cached blocks), dropping a sequence between steps (what abort does),
 *     logprobs, and a closed engine refusing work;
 *   - through the EngineLoop, since the scheduler and block manager (not the engine) own abort
 *     and KV events: a stream equals the engine stepped by hand, a repeated prompt hits the
 *     cache with the same tokens, an abort frees blocks without touching a neighbour, and the
 *     KV events carry the prompt's block hashes exactly as the router computes them.
 *
 * Block tables are chosen by hand (disjoint ranges per test) so a test controls which blocks
 * are shared. Tokens are compared across runs, never to fixed ids: the mocker's depend on
 * (request seed, position), the native engine's on its random weights.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KvEvent, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { blockHashes } from '../../router/hashing.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import type { Engine, StepBatch, StepSequence } from '../../workers/engines/engine.js';
import { blocks, GREEDY, seq, tokens } from '../native/helpers.js';

export interface EngineHarness {
  /** A fresh engine with its own pool of `numBlocks` blocks of `blockSize` tokens. */
  open(pool: { numBlocks: number; blockSize: number }): Promise<Engine>;
}

const BLOCK = 4;
const NUM_BLOCKS = 256;
/** Request seed for every sequence: the mocker's tokens depend on it, greedy native ignores it. */
const SEED = 11;

function one(spec: Parameters<typeof seq>[0]): StepSequence {
  return seq({ requestSeed: SEED, ...spec });
}

/** Runs one sequence by hand: prefill `prompt` into `table`, then decode until `n` tokens. */
async function generateByHand(engine: Engine, prompt: number[], table: Int32Array, n: number, seqId = 1): Promise<number[]> {
  const out: number[] = [];
  const history = [...prompt];
  let r = await engine.step({ sequences: [one({ seqId, tokens: prompt, blockTable: table, history })] });
  for (;;) {
    const t = r.sampled[0]!.tokenId;
    out.push(t);
    if (out.length === n) return out;
    history.push(t);
    r = await engine.step({
      sequences: [one({ seqId, tokens: [t], startPos: history.length - 1, blockTable: table, history: [...history], numPromptTokens: prompt.length })],
    });
  }
}

function req(id: string, prompt: number[], maxTokens: number): PreprocessedRequest {
  return {
    requestId: id,
    model: 'contract',
    tokenIds: prompt,
    sampling: { ...GREEDY, seed: SEED },
    stop: { maxTokens, stopTokenIds: [], ignoreEos: true },
  };
}

async function collect(stream: AsyncIterable<TokenDelta>): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

const tokensOf = (deltas: TokenDelta[]): number[] => deltas.flatMap((d) => d.tokenIds);

/** The block set a router rebuilds from the events. */
function replay(events: KvEvent[]): Set<string> {
  const set = new Set<string>();
  for (const e of events) {
    if (e.data.type === 'stored') for (const b of e.data.blocks) set.add(b.blockHash);
    else if (e.data.type === 'removed') for (const h of e.data.blockHashes) set.delete(h);
    else set.clear();
  }
  return set;
}

export function engineContract(name: string, harness: () => EngineHarness): void {
  describe(`engine contract: ${name}`, () => {
    describe('step semantics', () => {
      let engine: Engine;
      let vocab: number;
      const promptA = (): number[] => tokens(10, vocab, 1);
      const promptB = (): number[] => tokens(6, vocab, 2);

      beforeAll(async () => {
        engine = await harness().open({ numBlocks: NUM_BLOCKS, blockSize: BLOCK });
        vocab = engine.info.vocabSize;
      });
      afterAll(async () => {
        await engine.close();
      });

      it('reports its pool: numBlocks and blockSize as asked, a positive vocabulary', () => {
        expect(engine.info).toMatchObject({ numBlocks: NUM_BLOCKS, blockSize: BLOCK });
        expect(engine.info.vocabSize).toBeGreaterThan(0);
        expect(['mocker', 'native']).toContain(engine.info.kind);
      });

      it('samples one token per sampling sequence, in batch order, inside the vocabulary; a non-final chunk samples nothing', async () => {
        const batch: StepBatch = {
          sequences: [
            one({ seqId: 7, tokens: promptA(), blockTable: blocks(0, 3) }),
            one({ seqId: 3, tokens: tokens(8, vocab, 3), blockTable: blocks(3, 2), sample: false }),
            one({ seqId: 5, tokens: promptB(), blockTable: blocks(5, 2) }),
          ],
        };
        const r = await engine.step(batch);
        expect(r.sampled.map((s) => s.seqId)).toEqual([7, 5]);
        for (const s of r.sampled) {
          expect(Number.isInteger(s.tokenId)).toBe(true);
          expect(s.tokenId).toBeGreaterThanOrEqual(0);
          expect(s.tokenId).toBeLessThan(vocab);
          expect(s.logprob).toBeUndefined();
        }
      });

      it('greedy is deterministic: the same prompt in fresh blocks, alone or in a batch, samples the same token', async () => {
        const alone = await engine.step({ sequences: [one({ tokens: promptA(), blockTable: blocks(8, 3) })] });
        const batched = await engine.step({
          sequences: [one({ seqId: 2, tokens: promptB(), blockTable: blocks(16, 2) }), one({ seqId: 1, tokens: promptA(), blockTable: blocks(12, 3) })],
        });
        const again = await engine.step({ sequences: [one({ tokens: promptA(), blockTable: blocks(20, 3) })] });
        expect(batched.sampled[1]!.tokenId).toBe(alone.sampled[0]!.tokenId);
        expect(again.sampled[0]!.tokenId).toBe(alone.sampled[0]!.tokenId);
      });

      it('decode continues a prefill: the third token equals a fresh prefill of prompt + first two tokens', async () => {
        const [t0, t1, t2] = await generateByHand(engine, promptA(), blocks(24, 4), 3);
        const longer = [...promptA(), t0!, t1!];
        const fresh = await engine.step({ sequences: [one({ tokens: longer, blockTable: blocks(28, 3), numPromptTokens: 10 })] });
        expect(fresh.sampled[0]!.tokenId).toBe(t2);
      });

      it('chunked prefill (8 + 5 tokens) samples what one whole prefill samples', async () => {
        const p = tokens(13, vocab, 4);
        const whole = await engine.step({ sequences: [one({ tokens: p, blockTable: blocks(32, 4) })] });
        const table = blocks(36, 4);
        const first = await engine.step({ sequences: [one({ tokens: p.slice(0, 8), blockTable: table.subarray(0, 2), sample: false, history: p, numPromptTokens: 13 })] });
        expect(first.sampled).toEqual([]);
        const last = await engine.step({ sequences: [one({ tokens: p.slice(8), startPos: 8, blockTable: table, history: p, numPromptTokens: 13 })] });
        expect(last.sampled[0]!.tokenId).toBe(whole.sampled[0]!.tokenId);
      });

      it('prefix hit: reusing 3 cached full blocks and computing 1 token gives the fresh run\'s tokens', async () => {
        const p = tokens(13, vocab, 5);
        // Blocks 40..42 hold positions 0..11 of p after this run; 43 holds position 12 onwards.
        const fresh = await generateByHand(engine, p, blocks(40, 5), 3, 1);
        const hitTable = Int32Array.from([40, 41, 42, 50, 51]);
        const hist = [...p];
        let r = await engine.step({ sequences: [one({ seqId: 2, tokens: p.slice(12), startPos: 12, blockTable: hitTable, history: hist, numPromptTokens: 13 })] });
        const hit: number[] = [r.sampled[0]!.tokenId];
        while (hit.length < 3) {
          hist.push(hit[hit.length - 1]!);
          r = await engine.step({ sequences: [one({ seqId: 2, tokens: [hit[hit.length - 1]!], startPos: hist.length - 1, blockTable: hitTable, history: [...hist], numPromptTokens: 13 })] });
          hit.push(r.sampled[0]!.tokenId);
        }
        expect(hit).toEqual(fresh);
      });

      it('a sequence dropped between steps (an abort) leaves the other sequence\'s tokens unchanged', async () => {
        const alone = await generateByHand(engine, promptA(), blocks(60, 4), 5);
        const aTable = blocks(64, 4);
        const bTable = blocks(68, 4);
        const aHist = [...promptA()];
        const bHist = [...promptB()];
        let r = await engine.step({
          sequences: [one({ seqId: 1, tokens: promptA(), blockTable: aTable, history: aHist }), one({ seqId: 2, tokens: promptB(), blockTable: bTable, history: bHist })],
        });
        const got: number[] = [];
        for (let i = 0; i < 4; i++) {
          const a = r.sampled.find((s) => s.seqId === 1)!.tokenId;
          got.push(a);
          aHist.push(a);
          const seqs = [one({ seqId: 1, tokens: [a], startPos: aHist.length - 1, blockTable: aTable, history: [...aHist], numPromptTokens: 10 })];
          if (i < 2) {
            // B decodes alongside A for two steps, then is dropped, as the scheduler does on abort.
            const b = r.sampled.find((s) => s.seqId === 2)!.tokenId;
            bHist.push(b);
            seqs.push(one({ seqId: 2, tokens: [b], startPos: bHist.length - 1, blockTable: bTable, history: [...bHist], numPromptTokens: 6 }));
          }
          r = await engine.step({ sequences: seqs });
          expect(r.sampled.map((s) => s.seqId)).toEqual(i < 2 ? [1, 2] : [1]);
        }
        got.push(r.sampled[0]!.tokenId);
        expect(got).toEqual(alone);
      });

      it('logprobs: the sampled logprob is ≤ 0; top-k has k entries, descending, led by the greedy token', async () => {
        const r = await engine.step({
          sequences: [one({ seqId: 1, tokens: promptA(), blockTable: blocks(80, 3), logprobs: 3 }), one({ seqId: 2, tokens: promptB(), blockTable: blocks(84, 2), logprobs: 0 })],
        });
        const [a, b] = r.sampled;
        expect(a!.logprob).toBeLessThanOrEqual(0);
        expect(a!.topLogprobs).toHaveLength(3);
        expect(a!.topLogprobs![0]!.tokenId).toBe(a!.tokenId);
        const lps = a!.topLogprobs!.map((t) => t.logprob);
        expect([...lps].sort((x, y) => y - x)).toEqual(lps);
        expect(b!.logprob).toBeLessThanOrEqual(0);
        expect(b!.topLogprobs).toBeUndefined();
      });

      it('a step after close() rejects with unavailable', async () => {
        const other = await harness().open({ numBlocks: 16, blockSize: BLOCK });
        await other.close();
        await expect(other.step({ sequences: [one({ tokens: [1, 2], blockTable: blocks(0, 1) })] })).rejects.toMatchObject({ code: 'unavailable' });
      });
    });

    describe('through the engine loop (scheduler + block manager)', () => {
      const open = async (events?: KvEvent[]): Promise<EngineLoop> => {
        const engine = await harness().open({ numBlocks: NUM_BLOCKS, blockSize: BLOCK });
        return new EngineLoop({
          engine,
          workerId: '00000000000000c7',
          ...(events ? { sinks: { onKvEvents: (e: KvEvent[]) => events.push(...e) } } : {}),
        });
      };

      it('a request streams exactly what stepping the engine by hand gives', async () => {
        const engine = await harness().open({ numBlocks: NUM_BLOCKS, blockSize: BLOCK });
        const prompt = tokens(10, engine.info.vocabSize, 6);
        // By hand first, in blocks the loop's block manager will later overwrite.
        const byHand = await generateByHand(engine, prompt, blocks(200, 5), 6);
        const loop = new EngineLoop({ engine });
        const deltas = await collect(loop.generate(req('hand', prompt, 6), new AbortController().signal));
        expect(tokensOf(deltas)).toEqual(byHand);
        expect(deltas[deltas.length - 1]).toMatchObject({ finishReason: 'length', usage: { promptTokens: 10, completionTokens: 6, cachedTokens: 0 } });
        await loop.close();
      });

      it('a repeated 18-token prompt hits its 4 cached full blocks (16 tokens) and streams the same tokens', async () => {
        const loop = await open();
        const prompt = tokens(18, loop.engine.info.vocabSize, 7);
        const first = await collect(loop.generate(req('p1', prompt, 5), new AbortController().signal));
        const second = await collect(loop.generate(req('p2', prompt, 5), new AbortController().signal));
        expect(first[first.length - 1]!.usage!.cachedTokens).toBe(0);
        expect(second[second.length - 1]!.usage!.cachedTokens).toBe(16);
        expect(tokensOf(second)).toEqual(tokensOf(first));
        expect(loop.stats().prefixCacheHits).toBe(16);
        await loop.close();
      });

      it('aborting one request frees its blocks at once; the request beside it streams what it streams alone', async () => {
        const events: KvEvent[] = [];
        const loop = await open(events);
        const vocab = loop.engine.info.vocabSize;
        const pa = tokens(9, vocab, 8);
        const pb = tokens(11, vocab, 9);
        const alone = tokensOf(await collect(loop.generate(req('a0', pa, 8), new AbortController().signal)));
        const ac = new AbortController();
        const a = collect(loop.generate(req('a1', pa, 8), new AbortController().signal));
        const b = loop.generate(req('b', pb, 500), ac.signal);
        const firstB = await b.next();
        expect(firstB.done).toBe(false);
        ac.abort();
        const rest: TokenDelta[] = [];
        for (let n = await b.next(); !n.done; n = await b.next()) rest.push(n.value);
        expect(rest[rest.length - 1]!.finishReason).toBe('cancelled');
        expect(tokensOf([firstB.value as TokenDelta, ...rest]).length).toBeLessThan(500);
        expect(tokensOf(await a)).toEqual(alone);
        await loop.idle();
        expect(loop.stats()).toMatchObject({ activeBlocks: 0, numRunning: 0, numActiveRequests: 0 });
        expect(replay(events)).toEqual(loop.scheduler.blockManager.cachedBlockHashes());
        await loop.close();
      });

      it('KV events: numbered from 0 without gaps, stamped with the worker, and the prompt\'s blocks carry the router\'s hashes', async () => {
        const events: KvEvent[] = [];
        const loop = await open(events);
        const prompt = tokens(18, loop.engine.info.vocabSize, 10);
        await collect(loop.generate(req('kv', prompt, 3), new AbortController().signal));
        expect(events.length).toBeGreaterThan(0);
        expect(events.map((e) => e.eventId)).toEqual(events.map((_, i) => i));
        expect(events.every((e) => e.workerId === '00000000000000c7')).toBe(true);
        const stored = events.flatMap((e) => (e.data.type === 'stored' ? e.data.blocks : []));
        const want = blockHashes(prompt, BLOCK);
        expect(stored.slice(0, 4).map((b) => b.blockHash)).toEqual(want.seq.map(String));
        expect(stored.slice(0, 4).map((b) => b.tokensHash)).toEqual(want.local.map(String));
        expect(replay(events)).toEqual(loop.scheduler.blockManager.cachedBlockHashes());
        await loop.close();
      });
    });
  });
}
