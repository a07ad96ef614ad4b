import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { KvTierPolicy, onboardCount, type EvictedBlock, type OnboardSource, type TierOp } from '../../workers/block-manager/kv-tier-policy.js';

const BS = 4;
const tokensFor = (h: number, variant: number): Int32Array => Int32Array.from([h, variant, 7, 7]);
const keyOf = (t: Int32Array): string => Array.from(t).join(',');
const evicted = (h: number, reuse: number, variant = 0): EvictedBlock => ({ hash: BigInt(h), blockId: h, tokens: tokensFor(h, variant), reuse });

describe('KvTierPolicy', () => {
  it('offers G1 evictions to the host tier and pushes out its least recently used block', () => {
    const p = new KvTierPolicy({ hostBlocks: 2, diskBlocks: 0 });
    expect(p.offload([evicted(1, 0), evicted(2, 0)]).map((o) => o.op)).toEqual(['device-to-host', 'device-to-host']);
    // Evicting 1 again copies nothing (G2 already holds it) and makes it the most recent.
    expect(p.offload([evicted(1, 0)])).toEqual([]);
    p.offload([evicted(3, 0)]);
    expect(p.host.blocks().map((b) => Number(b.hash))).toEqual([1, 3]);
    expect(p.counters.droppedBlocks).toBe(1);
  });

  it('promotes a block pushed out of the host tier to disk only after diskMinReuse hits', () => {
    const p = new KvTierPolicy({ hostBlocks: 1, diskBlocks: 4, diskMinReuse: 2 });
    p.offload([evicted(1, 1)]);
    expect(p.offload([evicted(2, 2)]).map((o) => o.op)).toEqual(['device-to-host']); // 1 (reuse 1) dropped
    const ops = p.offload([evicted(3, 2)]); // 2 (reuse 2) goes to disk
    expect(ops.map((o) => o.op)).toEqual(['host-to-disk', 'device-to-host']);
    const toDisk = ops[0] as Extract<TierOp, { op: 'host-to-disk' }>;
    // Two evictions in one batch: 4 pushes 3 (reuse 2) out to disk, then 5 takes 3's slot, so
    // 3's disk copy is listed (read) before 5 overwrites that slot.
    const batch = p.offload([evicted(4, 0), evicted(5, 0)]);
    const read = batch.findIndex((o) => o.op === 'host-to-disk' && o.hash === 3n);
    const write = batch.findIndex((o) => o.op === 'device-to-host' && o.hash === 5n);
    expect(read).toBeGreaterThanOrEqual(0);
    expect(write).toBeGreaterThan(read);
    expect((batch[write] as Extract<TierOp, { op: 'device-to-host' }>).hostSlot).toBe((batch[read] as Extract<TierOp, { op: 'host-to-disk' }>).hostSlot);
    // Not served until the write is confirmed.
    const match = (h: number[]): OnboardSource[] => p.match(h.map(BigInt), 0, (b, t) => keyOf(t) === keyOf(tokensFor(h[b]!, 0)));
    expect(match([2])).toEqual([]);
    p.diskWriteDone(2n, toDisk.writeId, true);
    expect(match([2, 5]).map((s) => [s.hash, s.tier])).toEqual([
      [2n, 'disk'],
      [5n, 'host'],
    ]);
  });

  it('drops a block whose disk write failed', () => {
    const p = new KvTierPolicy({ hostBlocks: 1, diskBlocks: 4, diskMinReuse: 0 });
    p.offload([evicted(1, 0)]);
    const w = p.offload([evicted(2, 0)])[0] as Extract<TierOp, { op: 'host-to-disk' }>;
    expect(p.diskWriteDone(1n, w.writeId, false)).toEqual([{ op: 'drop-disk', hash: 1n }]);
    expect(p.disk.size).toBe(0);
    expect(p.counters.diskWriteErrors).toBe(1);
  });

  it('onboards only the run whose copy is cheaper than its recompute', () => {
    const linear = { hostMsPerBlock: 1, diskMsPerBlock: 10, prefillMs: (t: number) => 20 + t * 0.5 }; // 2 ms per 4-token block
    const src = (tier: 'host' | 'disk'): OnboardSource => ({ hash: 0n, tier, slot: 0 });
    expect(onboardCount([src('host'), src('host')], linear, BS, 10)).toBe(2);
    expect(onboardCount([src('disk')], linear, BS, 10)).toBe(0);
    // Two host blocks (saving 2 ms) pay for... nothing more: a disk block at 10 ms is not worth 2 ms.
    expect(onboardCount([src('host'), src('disk'), src('host')], linear, BS, 10)).toBe(1);
  });

  it('random operations against a reference model: nothing reachable is lost, nothing stale is served', () => {
    type Op =
      | { k: 'evict'; blocks: Array<{ h: number; variant: number; reuse: number }> }
      | { k: 'flush'; ok: boolean }
      | { k: 'lookup'; hs: number[]; commit: boolean }
      | { k: 'corrupt'; h: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      {
        weight: 5,
        arbitrary: fc.record({
          k: fc.constant('evict' as const),
          // One step's evictions: distinct blocks (the pool evicts a block once).
          blocks: fc.uniqueArray(fc.record({ h: fc.integer({ min: 0, max: 5 }), variant: fc.integer({ min: 0, max: 1 }), reuse: fc.integer({ min: 0, max: 3 }) }), { minLength: 1, maxLength: 3, selector: (b) => b.h }),
        }),
      },
      { weight: 2, arbitrary: fc.record({ k: fc.constant('flush' as const), ok: fc.boolean() }) },
      { weight: 3, arbitrary: fc.record({ k: fc.constant('lookup' as const), hs: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 5 }), commit: fc.boolean() }) },
      { weight: 1, arbitrary: fc.record({ k: fc.constant('corrupt' as const), h: fc.integer({ min: 0, max: 5 }) }) },
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 3 }), fc.array(op, { maxLength: 80 }), (hostBlocks, diskBlocks, minReuse, ops) => {
        const p = new KvTierPolicy({ hostBlocks, diskBlocks, diskMinReuse: minReuse });
        // The bytes, as an adapter would hold them: host slots and a disk whose ops run in FIFO order.
        const hostSlots: Array<string | undefined> = new Array(p.host.slotCount).fill(undefined);
        const files = new Map<bigint, string>();
        const diskQueue: Array<{ write?: { hash: bigint; writeId: number; bytes: string }; drop?: bigint }> = [];
        const run = (tierOps: TierOp[], staged?: Map<bigint, string>): void => {
          for (const o of tierOps) {
            if (o.op === 'device-to-host') hostSlots[o.hostSlot] = staged?.get(o.hash);
            else if (o.op === 'host-to-disk') diskQueue.push({ write: { hash: o.hash, writeId: o.writeId, bytes: hostSlots[o.hostSlot]! } });
            else diskQueue.push({ drop: o.hash });
          }
        };
        // Reference model: plain LRU arrays with the documented rules.
        type MBlock = { h: number; tok: string; reuse: number; pending: boolean };
        const mHost: MBlock[] = [];
        const mDisk: MBlock[] = [];
        const demote = (b: MBlock): void => {
          if (diskBlocks === 0 || b.reuse < minReuse) return;
          const i = mDisk.findIndex((d) => d.h === b.h);
          if (i >= 0) {
            const [d] = mDisk.splice(i, 1);
            d!.reuse = Math.max(d!.reuse, b.reuse);
            mDisk.push(d!);
            return;
          }
          if (mDisk.length >= diskBlocks) mDisk.shift();
          mDisk.push({ ...b, pending: true });
        };
        for (const o of ops) {
          if (o.k === 'evict') {
            const staged = new Map(o.blocks.map((e) => [BigInt(e.h), `${e.h}:${keyOf(tokensFor(e.h, e.variant))}`]));
            run(p.offload(o.blocks.map((e) => evicted(e.h, e.reuse, e.variant))), staged);
            for (const e of o.blocks) {
              const tok = keyOf(tokensFor(e.h, e.variant));
              const i = mHost.findIndex((b) => b.h === e.h);
              if (i >= 0) {
                const [b] = mHost.splice(i, 1);
                if (b!.tok === tok) b!.reuse = Math.max(b!.reuse, e.reuse);
                mHost.push(b!);
              } else {
                const d = mDisk.find((b) => b.h === e.h && b.tok === tok);
                mHost.push({ h: e.h, tok, reuse: Math.max(e.reuse, d?.reuse ?? 0), pending: false });
                if (mHost.length > hostBlocks) demote(mHost.shift()!);
              }
            }
          } else if (o.k === 'flush') {
            const next = diskQueue.shift();
            if (next?.drop !== undefined) files.delete(next.drop);
            if (next?.write !== undefined) {
              if (o.ok) files.set(next.write.hash, next.write.bytes);
              run(p.diskWriteDone(next.write.hash, next.write.writeId, o.ok));
              const d = mDisk.find((b) => BigInt(b.h) === next.write!.hash && b.pending);
              if (d !== undefined && diskQueue.every((q) => q.write?.hash !== next.write!.hash)) {
                if (o.ok) d.pending = false;
                else mDisk.splice(mDisk.indexOf(d), 1);
              }
            }
          } else if (o.k === 'corrupt') {
            // A file found unreadable on load is forgotten (the store deleted it).
            if (files.has(BigInt(o.h)) && p.disk.peek(BigInt(o.h))?.pending === false) {
              p.diskReadFailed(BigInt(o.h));
              files.delete(BigInt(o.h));
              mDisk.splice(mDisk.findIndex((b) => b.h === o.h), 1);
            }
          } else {
            const want = o.hs.map((h) => keyOf(tokensFor(h, 0)));
            const got = p.match(o.hs.map(BigInt), 0, (b, t) => keyOf(t) === want[b]);
            // The model's answer.
            const expected: string[] = [];
            for (let b = 0; b < o.hs.length; b++) {
              if (mHost.some((x) => x.h === o.hs[b] && x.tok === want[b])) expected.push('host');
              else if (mDisk.some((x) => x.h === o.hs[b] && x.tok === want[b] && !x.pending)) expected.push('disk');
              else break;
            }
            expect(got.map((s) => s.tier)).toEqual(expected);
            // Every source serves exactly the bytes offloaded for that hash and those tokens.
            got.forEach((s, b) => {
              const bytes = s.tier === 'host' ? hostSlots[s.slot] : files.get(s.hash);
              expect(bytes).toBe(`${o.hs[b]}:${want[b]}`);
            });
            if (o.commit) {
              p.commitOnboard(got);
              for (const s of got) {
                const list = s.tier === 'host' ? mHost : mDisk;
                const i = list.findIndex((x) => BigInt(x.h) === s.hash);
                const [x] = list.splice(i, 1);
                x!.reuse++;
                list.push(x!);
              }
            }
          }
          expect(p.host.blocks().map((b) => `${b.hash}:${keyOf(b.tokens)}`)).toEqual(mHost.map((b) => `${b.h}:${b.tok}`));
          expect(p.disk.blocks().map((b) => `${b.hash}:${b.pending}`)).toEqual(mDisk.map((b) => `${b.h}:${b.pending}`));
        }
      }),
      { numRuns: 1000 },
    );
  });
});
