/**
 * Cache isolation for adapters: blocks computed under an adapter are keyed by its lora_id, so
 * the same prompt under two adapters (or an adapter and the base model) shares no block in the
 * worker's prefix cache, and the router, fed that worker's KV events, credits no cross-adapter
 * overlap. Under one adapter blocks are shared as before, and base-model hashes are unchanged.
 */
import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../workers/block-manager/block-manager.js';
import { KvEventLog } from '../../workers/block-manager/kv-event-log.js';
import { Sequence } from '../../workers/sequence.js';
import { blockHashes, loraIdOf } from '../../router/hashing.js';
import { BlockHasher } from '../../router/block-hasher.js';
import { KvRouter, type RouteResult } from '../../router/kv-router.js';
import type { KvEventData } from '../../proto/wire.js';

const BS = 16;
const PROMPT = Array.from({ length: 5 * BS + 3 }, (_, i) => (i * 37 + 11) % 1000);
const A = loraIdOf('sql', '00112233aabbccdd');
const B = loraIdOf('chat', '00112233aabbccdd');
let nextSeq = 0;

function seqOf(loraId?: number): Sequence {
  return new Sequence({
    seqId: nextSeq++,
    requestId: `r${nextSeq}`,
    promptTokenIds: PROMPT,
    sampling: { temperature: 0 },
    stop: { maxTokens: 4 },
    requestSeed: 1,
    ...(loraId === undefined ? {} : { loraId }),
  });
}

function prefill(bm: BlockManager, s: Sequence): number {
  const hit = bm.findPrefixHit(s);
  expect(bm.allocate(s, hit, s.numTokens - hit.numTokens)).toBe(true);
  s.numComputedTokens = s.numTokens;
  bm.commitComputed(s);
  return hit.numTokens;
}

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

describe('adapter-aware block hashes', () => {
  it('lora_id: the same name and weights give the same id; another name or other weights another', () => {
    expect(loraIdOf('sql', 'ab')).toBe(loraIdOf('sql', 'ab'));
    expect(loraIdOf('sql', 'ab')).not.toBe(loraIdOf('sql', 'ac'));
    expect(loraIdOf('sql', 'ab')).not.toBe(loraIdOf('sq', 'lab'));
    expect(Number.isSafeInteger(loraIdOf('sql', 'ab'))).toBe(true);
  });

  it('base-model hashes are exactly the tokens-only (Dynamo) hashes; the wasm and native hashers agree under an adapter', () => {
    const bm = new BlockManager({ numBlocks: 64, blockSize: BS });
    const s = seqOf();
    prefill(bm, s);
    const want = blockHashes(PROMPT, BS);
    expect(s.seqHashes).toEqual(want.seq);
    expect(s.localHashes).toEqual(want.local);
    const ev = bm.drainEvents()[0] as Extract<KvEventData, { type: 'stored' }>;
    expect(ev.loraId).toBeUndefined();
    const under = blockHashes(PROMPT, BS, A);
    expect(new BlockHasher(BS).both(PROMPT, A)).toEqual(under);
    expect(new BlockHasher(BS, { native: true }).both(PROMPT, A)).toEqual(under);
    expect(under.seq.some((h) => want.seq.includes(h))).toBe(false);
  });

  it('worker cache: two adapters share no block; one adapter shares as before; events carry lora_id', () => {
    const bm = new BlockManager({ numBlocks: 64, blockSize: BS });
    expect(prefill(bm, seqOf(A))).toBe(0);
    const stored = bm.drainEvents();
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({ type: 'stored', loraId: A });
    expect(prefill(bm, seqOf(B))).toBe(0);
    expect(prefill(bm, seqOf())).toBe(0);
    expect(prefill(bm, seqOf(A))).toBe(5 * BS);
    expect(prefill(bm, seqOf(B))).toBe(5 * BS);
    expect(prefill(bm, seqOf())).toBe(5 * BS);
    // Three private chains of 6 blocks, then 5 shared + 1 private partial block each.
    expect(bm.numActiveBlocks).toBe(3 * 6 + 3);
  });

  it('the event log dump keeps lora_id', () => {
    const bm = new BlockManager({ numBlocks: 64, blockSize: BS });
    const log = new KvEventLog({ workerId: 'w0' });
    prefill(bm, seqOf(A));
    prefill(bm, seqOf());
    log.append(bm.drainEvents());
    const dump = log.dump().events as Array<Extract<KvEventData, { type: 'stored' }>>;
    const byLora = (id: number | undefined) => dump.filter((e) => e.loraId === id).flatMap((e) => e.blocks.map((b) => b.blockHash));
    expect(byLora(A).sort()).toEqual(blockHashes(PROMPT, BS, A).seq.map(String).sort());
    expect(byLora(undefined).sort()).toEqual(blockHashes(PROMPT, BS).seq.map(String).sort());
  });

  it('router: fed the worker events, no cross-adapter overlap is counted; the same adapter is', () => {
    const router = new KvRouter({ blockSize: BS });
    router.addWorker('w0', 0);
    router.applyDump({ workerId: 'w0', nextEventId: 0, events: [] }, 0);
    router.addWorker('w1', 0);
    router.applyDump({ workerId: 'w1', nextEventId: 0, events: [] }, 0);
    const bm = new BlockManager({ numBlocks: 64, blockSize: BS });
    prefill(bm, seqOf(A));
    bm.drainEvents().forEach((data, eventId) => expect(router.applyEvent({ workerId: 'w0', eventId, data }, 0)).toEqual([]));
    const cands = [{ instanceId: 'w0' }, { instanceId: 'w1' }];
    const underA = routed(router.route({ requestId: 'a', tokens: PROMPT, loraId: A }, cands, 1));
    expect(underA.overlapBlocks).toBe(5);
    expect(underA.instanceId).toBe('w0');
    const underB = routed(router.route({ requestId: 'b', tokens: PROMPT, loraId: B }, cands, 1));
    expect(underB.overlapBlocks).toBe(0);
    const base = routed(router.route({ requestId: 'c', tokens: PROMPT }, cands, 1));
    expect(base.overlapBlocks).toBe(0);
  });
});

describe('adapter affinity in the KV router', () => {
  it('prefers the worker holding the adapter; a load penalty, not a ban, so a busy holder loses', () => {
    const router = new KvRouter({ blockSize: BS, loraLoadPenaltyBlocks: 32 });
    for (const w of ['w0', 'w1']) {
      router.addWorker(w, 0);
      router.applyDump({ workerId: w, nextEventId: 0, events: [] }, 0);
    }
    const cands = [{ instanceId: 'w0' }, { instanceId: 'w1' }];
    // Idle fleet: without residency the two tie; with it the holder wins every time.
    for (let i = 0; i < 8; i++) {
      const d = routed(router.select({ requestId: `a${i}`, tokens: PROMPT, loraId: A, loraResident: ['w1'] }, cands));
      expect(d.instanceId).toBe('w1');
      const rows = new Map(d.costs.map((r) => [r.instanceId, r.cost]));
      expect(rows.get('w0')! - rows.get('w1')!).toBe(32);
    }
    // The holder gets busy: requests booked there outweigh the load penalty.
    for (let i = 0; i < 10; i++) expect(router.route({ requestId: `busy${i}`, tokens: PROMPT.map((t) => t + i + 1) }, [{ instanceId: 'w1' }], 0).kind).toBe('routed');
    const d = routed(router.select({ requestId: 'late', tokens: PROMPT, loraId: A, loraResident: ['w1'] }, cands));
    const rows = new Map(d.costs.map((r) => [r.instanceId, r.cost]));
    expect(rows.get('w1')!).toBeGreaterThan(32);
    expect(d.instanceId).toBe('w0');
  });

  it('under --router-cost latency the penalty is the prefill time of as many blocks, and the holder still wins', () => {
    const router = new KvRouter({ blockSize: BS, loraLoadPenaltyBlocks: 32, cost: 'latency' });
    for (const w of ['w0', 'w1']) {
      router.addWorker(w, 0);
      router.applyDump({ workerId: w, nextEventId: 0, events: [] }, 0);
    }
    const cands = [{ instanceId: 'w0' }, { instanceId: 'w1' }];
    for (let i = 0; i < 8; i++) {
      const d = routed(router.select({ requestId: `l${i}`, tokens: PROMPT, loraId: A, loraResident: ['w1'] }, cands));
      expect(d.instanceId).toBe('w1');
      const rows = new Map(d.costs.map((r) => [r.instanceId, r]));
      expect(rows.get('w0')!.latency!.ttftMs).toBeCloseTo(rows.get('w1')!.latency!.ttftMs, 9);
      expect(rows.get('w0')!.cost).toBeGreaterThan(rows.get('w1')!.cost);
    }
  });
});
