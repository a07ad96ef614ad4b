/**
 * Multi-LoRA slots in the KV router (router/lora-affinity.ts `loraSlotWaits`): a worker runs at
 * most its reported `maxLoras` distinct adapters at once, and its scheduler holds a request for
 * a further adapter (and every adapter request behind it) until one drains. The router counts
 * the adapters it has in flight per worker (ActiveSequences.adaptersWith, replicated over
 * router_sync) and charges half an adapter load time per adapter beyond the slots (a whole
 * load made a holder over its slots tie with an idle non-holder and loaded adapters all run).
 *
 * Before this, the block cost could not see the hold: with both workers holding every adapter,
 * the one running four adapters with a lighter batch drew the fifth adapter, and the worker's
 * scheduler held it (and all adapter requests behind it) while round-robin spread them.
 */
import { describe, expect, it } from 'vitest';
import type { LoadMetrics } from '../../proto/wire.js';
import { ActiveSequences } from '../../router/active-sequences.js';
import { loraIdOf } from '../../router/hashing.js';
import { KvRouter, type RouteResult, type WorkerCandidate } from '../../router/kv-router.js';
import { loraSlotWaits } from '../../router/lora-affinity.js';
import { updateFromWire, updateToWire } from '../../router/router-sync.js';
import { idleReport, tokens } from './fixtures.js';

const BS = 16;
const ids = Array.from({ length: 6 }, (_, i) => loraIdOf(`ad-${i}`, '00112233aabbccdd'));

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

const report = (workerId: string, maxLoras?: number): LoadMetrics => idleReport(workerId, maxLoras !== undefined ? { maxLoras } : {});

function fleet(workers: string[]): KvRouter {
  const router = new KvRouter({ blockSize: BS, loraLoadMs: 50 });
  for (const w of workers) {
    router.addWorker(w, 0);
    router.applyDump({ workerId: w, nextEventId: 0, events: [] }, 0);
  }
  return router;
}

describe('adapter slots in the KV router', () => {
  it('loraSlotWaits: adapters beyond the slots, 0 without a reported maxLoras', () => {
    expect(loraSlotWaits(4, 4)).toBe(0);
    expect(loraSlotWaits(6, 4)).toBe(2);
    expect(loraSlotWaits(9, undefined)).toBe(0);
  });

  it('a worker already running its 4 adapters does not draw a fifth, though its batch is lighter', () => {
    const router = fleet(['w0', 'w1']);
    const cands: WorkerCandidate[] = [
      { instanceId: 'w0', load: report('w0', 4) },
      { instanceId: 'w1', load: report('w1', 4) },
    ];
    const both = ['w0', 'w1'];
    // w0: four adapters in flight, one short request each (4 × 2 blocks).
    for (let i = 0; i < 4; i++) routed(router.route({ requestId: `s${i}`, tokens: tokens(10 + i, 2 * BS), loraId: ids[i], loraResident: both }, [cands[0]!], 0));
    // w1: one adapter, one long request (40 blocks): heavier by blocks.
    routed(router.route({ requestId: 'long', tokens: tokens(20, 40 * BS), loraId: ids[0], loraResident: both }, [cands[1]!], 0));
    for (const r of ['s0', 's1', 's2', 's3', 'long']) router.onFirstToken(r, 0);

    const fifth = routed(router.select({ requestId: 'e', tokens: tokens(30, 2 * BS), loraId: ids[4], loraResident: both }, cands));
    const w0 = fifth.costs.find((c) => c.instanceId === 'w0')!;
    expect(w0.loraSlotWaits).toBe(1);
    expect(fifth.costs.find((c) => c.instanceId === 'w1')!.loraSlotWaits).toBeUndefined();
    expect(fifth.instanceId).toBe('w1');
    // One of w0's own adapters still fits there: no slot wait, and its lighter batch wins.
    const own = routed(router.select({ requestId: 'f', tokens: tokens(31, 2 * BS), loraId: ids[2], loraResident: both }, cands));
    expect(own.costs.find((c) => c.instanceId === 'w0')!.loraSlotWaits).toBeUndefined();
    expect(own.instanceId).toBe('w0');
  });

  it('a slot wait is half a load: it neither sends the adapter to an idle non-holder nor asks to load it there', () => {
    const router = fleet(['w0', 'w1']);
    const cands: WorkerCandidate[] = [
      { instanceId: 'w0', load: report('w0', 4) },
      { instanceId: 'w1', load: report('w1', 4) },
    ];
    // w0 holds adapter 4 and runs four others; w1 is idle and would have to load it. (Those four
    // count in the demand window too, so adapter 4's share asks for no second holder.)
    for (let i = 0; i < 4; i++) routed(router.route({ requestId: `s${i}`, tokens: tokens(10 + i, 2 * BS), loraId: ids[i], loraResident: ['w0'] }, [cands[0]!], 0));
    for (let i = 0; i < 4; i++) router.onFirstToken(`s${i}`, 0);
    const d = routed(router.select({ requestId: 'e', tokens: tokens(30, 2 * BS), loraId: ids[4], loraResident: ['w0'] }, cands));
    const [w0, w1] = [d.costs.find((c) => c.instanceId === 'w0')!, d.costs.find((c) => c.instanceId === 'w1')!];
    expect(w0.loraSlotWaits).toBe(1);
    // 50 ms load = 194.7 blocks (lora-affinity.test.ts); the slot wait is half that.
    expect(w0.cost - w0.prefillBlocks - w0.activeDecodeBlocks).toBeCloseTo(194.7 / 2, 0);
    expect(w1.cost - w1.prefillBlocks - w1.activeDecodeBlocks).toBeCloseTo(194.7, 0);
    expect(d.instanceId).toBe('w0');
    expect(d.loraPrefetch).toBeUndefined();
  });

  it('an adapter leaves the count when its last request finishes; a worker that reports no maxLoras is never charged', () => {
    const active = new ActiveSequences({ blockSize: BS, ttlMs: 60_000 });
    const add = (requestId: string, loraId?: number) => active.apply({ type: 'add', requestId, workerId: 'w0', blockHashes: [], promptTokens: BS, overlapBlocks: 0, ...(loraId !== undefined ? { loraId } : {}) }, 0);
    add('a', ids[0]);
    add('b', ids[0]);
    add('c', ids[1]);
    add('base');
    expect(active.adaptersWith('w0', ids[0]!)).toBe(2);
    expect(active.adaptersWith('w0', ids[2]!)).toBe(3);
    active.apply({ type: 'free', requestId: 'a' }, 0);
    expect(active.adaptersWith('w0', ids[2]!)).toBe(3);
    active.apply({ type: 'free', requestId: 'b' }, 0);
    expect(active.adaptersWith('w0', ids[2]!)).toBe(2);

    const router = fleet(['w0']);
    for (let i = 0; i < 5; i++) routed(router.route({ requestId: `n${i}`, tokens: tokens(40 + i, BS), loraId: ids[i] }, [{ instanceId: 'w0' }], 0));
    const d = routed(router.select({ requestId: 'x', tokens: tokens(50, BS), loraId: ids[5] }, [{ instanceId: 'w0', load: report('w0') }]));
    expect(d.costs[0]!.loraSlotWaits).toBeUndefined();
  });

  it('router_sync carries the adapter, so a replica counts it too', () => {
    const wire = updateToWire({ type: 'add', requestId: 'r', workerId: 'w0', blockHashes: [1n], promptTokens: BS, overlapBlocks: 0, loraId: ids[3]! });
    const back = updateFromWire(JSON.parse(JSON.stringify(wire)));
    expect(back).toMatchObject({ type: 'add', loraId: ids[3] });
    const replica = new ActiveSequences({ blockSize: BS, ttlMs: 60_000 });
    replica.apply(back!, 0);
    expect(replica.adaptersWith('w0', ids[3]!)).toBe(1);
    expect(replica.adaptersWith('w0', ids[4]!)).toBe(2);
  });
});
