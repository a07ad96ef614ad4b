/**
 * Routing on tiered prefix caches, fed by real workers: EngineLoops on the mocker with host and
 * disk tiers publish device and tier (medium 'cpu' / 'disk') KV events; the router keeps the
 * tier per (worker, block) and discounts host hits in the cost. Also: the tier events survive a
 * gap (replay) and a dump.
 */
import { describe, expect, it } from 'vitest';
import { KvRouter, type RouteResult } from '../../router/kv-router.js';
import { DEFAULT_PREFIX_AFFINITY } from '../../router/prefix-affinity.js';
import type { KvEvent, PreprocessedRequest } from '../../proto/wire.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { createKvTiers, simulatedTierTarget } from '../../workers/kv-tiers/index.js';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { tokens } from './fixtures.js';

const BS = 16;
const PROMPT = tokens(1, 8 * BS + 1);
const FILLERS = [2, 3, 4].map((s) => tokens(s, 12 * BS));

interface Worker {
  id: string;
  loop: EngineLoop;
  events: KvEvent[];
}

async function worker(id: string, withTiers: boolean): Promise<Worker> {
  const engine = new MockerEngine({ numBlocks: 24, blockSize: BS, speedupRatio: 1000 });
  const blockBytes = 131072 * BS;
  const tiers = withTiers
    ? await createKvTiers({ hostCacheBytes: 64 * blockBytes, diskCacheBytes: 64 * blockBytes }, simulatedTierTarget(blockBytes, 1000, new PolynomialPerfModel()))
    : undefined;
  const events: KvEvent[] = [];
  const loop = new EngineLoop({ engine, workerId: id, sinks: { onKvEvents: (e) => events.push(...e) }, ...(tiers ? { kvTiers: tiers } : {}) });
  return { id, loop, events };
}

async function run(w: Worker, prompt: number[], n: number): Promise<void> {
  const req: PreprocessedRequest = { requestId: `${w.id}-${n}`, model: 'm', tokenIds: prompt, sampling: {}, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
  for await (const d of w.loop.generate(req, new AbortController().signal)) if (d.finishReason) break;
}

function connect(router: KvRouter, workers: Worker[]): void {
  for (const w of workers) {
    router.addWorker(w.id, 0);
    router.applyDump({ workerId: w.id, nextEventId: 0, events: [] }, 0);
    for (const e of w.events) expect(router.applyEvent(e, 1)).toEqual([]);
  }
}

function chosen(r: RouteResult): string {
  if (r.kind !== 'routed') throw new Error(r.kind);
  return r.decision.instanceId;
}

/** A worker that ran the prompt, then enough other prompts to push it out of its pool into G2. */
async function offloadedWorker(id: string): Promise<Worker> {
  const w = await worker(id, true);
  await run(w, PROMPT, 0);
  for (const [i, f] of FILLERS.entries()) await run(w, f, i + 1);
  return w;
}

describe('KV router with tiered worker caches', () => {
  it('sends a request to the worker holding its prefix in the host tier over one holding nothing', async () => {
    const tiered = await offloadedWorker('tiered');
    const empty = await worker('empty', false);
    await run(empty, FILLERS[0]!, 9);
    const router = new KvRouter({ blockSize: BS });
    connect(router, [tiered, empty]);
    // The prompt is in tiered's host tier only, not in its pool.
    expect(tiered.events.some((e) => e.data.type === 'stored' && e.data.medium === 'cpu')).toBe(true);
    expect(router.eventIndex!.findMatches(router['prepare']({ requestId: 'x', tokens: PROMPT }).local).depths.get('tiered') ?? 0).toBe(0);
    expect(router.tiers.hits('tiered', router['prepare']({ requestId: 'x', tokens: PROMPT }).seq, 0)).toEqual({ hostBlocks: 8, diskBlocks: 0 });
    for (let i = 0; i < 20; i++) {
      const r = router.select({ requestId: `r${i}`, tokens: PROMPT }, [{ instanceId: 'empty' }, { instanceId: 'tiered' }]);
      expect(chosen(r)).toBe('tiered');
      if (r.kind === 'routed') expect(r.decision.costs.find((c) => c.instanceId === 'tiered')!.hostBlocks).toBe(8);
    }
    // Without the host weight the cost is a tie (seeded random tie-break picks both) once prefix
    // affinity, which would keep the turn on the holder of its whole prompt, is off.
    const flat = new KvRouter({ blockSize: BS, weights: { prefillLoadScale: 1, overlapScoreCredit: 1, hostHitWeight: 0 }, prefixAffinity: { ...DEFAULT_PREFIX_AFFINITY, minHeldShare: 0 } });
    connect(flat, [tiered, empty]);
    const picks = new Set(Array.from({ length: 40 }, (_, i) => chosen(flat.select({ requestId: `f${i}`, tokens: PROMPT }, [{ instanceId: 'empty' }, { instanceId: 'tiered' }]))));
    expect(picks).toEqual(new Set(['empty', 'tiered']));
  });

  it('weighs host hits by what each worker reports: its onboard time against its recompute time', async () => {
    const tiered = await offloadedWorker('tiered');
    const empty = await worker('empty', false);
    const router = new KvRouter({ blockSize: BS });
    connect(router, [tiered, empty]);
    // The mocker's tiers: a 2 MiB block over 25 GB/s = 0.0839 ms to onboard; recomputing 16
    // tokens after 1024 costs 0.2568 ms in the default perf model → weight 1 − 0.0839/0.2568 = 0.673.
    const report = tiered.loop.loadMetrics();
    expect(report.tiers!.onboardMsPerBlock!.host).toBeCloseTo(0.0839, 3);
    expect(report.tiers!.recomputeMsPerBlock!).toBeCloseTo(0.2568, 3);
    const row = (r: RouteResult, id: string) => (r.kind === 'routed' ? r.decision.costs.find((c) => c.instanceId === id)! : undefined);
    const measured = row(router.select({ requestId: 'a', tokens: PROMPT }, [{ instanceId: 'empty' }, { instanceId: 'tiered', load: report }]), 'tiered')!;
    expect(measured.hostHitWeight).toBeCloseTo(0.673, 2);
    expect(measured.prefillBlocks).toBeCloseTo(9 - 0.673 * 8, 1);
    // A worker whose copies are slower than recomputing (1 ms a block) gets no credit at all.
    const slow = { ...report, tiers: { ...report.tiers!, onboardMsPerBlock: { host: 1, disk: 1 } } };
    expect(row(router.select({ requestId: 'b', tokens: PROMPT }, [{ instanceId: 'empty' }, { instanceId: 'tiered', load: slow }]), 'tiered')!).toMatchObject({ hostHitWeight: 0, prefillBlocks: 9 });
    // Given by hand (--router-host-hit-weight), the weight applies whatever the workers report.
    const fixed = new KvRouter({ blockSize: BS, measuredTierWeights: false, weights: { prefillLoadScale: 1, overlapScoreCredit: 1, hostHitWeight: 0.5 } });
    connect(fixed, [tiered, empty]);
    expect(row(fixed.select({ requestId: 'c', tokens: PROMPT }, [{ instanceId: 'empty' }, { instanceId: 'tiered', load: slow }]), 'tiered')!).toMatchObject({ hostHitWeight: 0.5, prefillBlocks: 5 });
  });

  it('prefers the worker holding the prefix in its pool (G1) over one holding it in the host tier (G2)', async () => {
    const tiered = await offloadedWorker('g2');
    const device = await worker('g1', false);
    await run(device, PROMPT, 0);
    const router = new KvRouter({ blockSize: BS });
    connect(router, [tiered, device]);
    for (let i = 0; i < 20; i++) expect(chosen(router.select({ requestId: `r${i}`, tokens: PROMPT }, [{ instanceId: 'g2' }, { instanceId: 'g1' }]))).toBe('g1');
  });

  it('the latency cost (--router-cost latency) also counts host-tier hits: G2 over nothing, G1 over G2', async () => {
    const tiered = await offloadedWorker('g2');
    const empty = await worker('none', false);
    await run(empty, FILLERS[0]!, 9);
    const device = await worker('g1', false);
    await run(device, PROMPT, 0);
    const router = new KvRouter({ blockSize: BS, cost: 'latency' });
    connect(router, [tiered, empty, device]);
    for (let i = 0; i < 20; i++) {
      const r = router.select({ requestId: `l${i}`, tokens: PROMPT }, [{ instanceId: 'none' }, { instanceId: 'g2' }]);
      expect(chosen(r)).toBe('g2');
      if (r.kind === 'routed') {
        const [g2, none] = ['g2', 'none'].map((id) => r.decision.costs.find((c) => c.instanceId === id)!.latency!.ttftMs);
        expect(g2!).toBeLessThan(none!);
      }
      expect(chosen(router.select({ requestId: `m${i}`, tokens: PROMPT }, [{ instanceId: 'g2' }, { instanceId: 'g1' }]))).toBe('g1');
    }
  });

  it('tier events replay correctly after a gap, and a dump carries the tiers', async () => {
    const w = await offloadedWorker('w');
    const reference = new KvRouter({ blockSize: BS });
    connect(reference, [w]);
    const want = reference.tiers.sizes('w');
    expect(want.hostBlocks).toBeGreaterThan(0);

    // A router that loses a run of events in the middle asks for exactly that range.
    const gapped = new KvRouter({ blockSize: BS });
    gapped.addWorker('w', 0);
    gapped.applyDump({ workerId: 'w', nextEventId: 0, events: [] }, 0);
    const tierIds = w.events.filter((e) => e.data.type !== 'cleared' && e.data.medium === 'cpu').map((e) => e.eventId);
    const lost = new Set(tierIds.slice(0, 3));
    const actions = w.events.flatMap((e) => (lost.has(e.eventId) ? [] : gapped.applyEvent(e, 1)));
    expect(actions).toEqual([{ type: 'request_replay', workerId: 'w', fromEventId: Math.min(...lost), toEventId: expect.any(Number) }]);
    const a = actions[0] as { fromEventId: number; toEventId: number };
    const replay = w.loop.kvEventLog.replay(a.fromEventId, a.toEventId);
    expect(replay.type).toBe('events');
    if (replay.type === 'events') expect(gapped.applyReplay({ type: 'events', workerId: 'w', events: replay.events }, 2)).toEqual([]);
    expect(gapped.tiers.sizes('w')).toEqual(want);
    expect(gapped.eventIndex!.blocksOf('w').sort()).toEqual(reference.eventIndex!.blocksOf('w').sort());

    // A dump gives a new router the same device and tier view.
    const fresh = new KvRouter({ blockSize: BS });
    fresh.addWorker('w', 0);
    const dump = w.loop.kvEventLog.dump();
    fresh.applyDump({ workerId: 'w', ...dump }, 0);
    expect(fresh.tiers.sizes('w')).toEqual(want);
    expect(fresh.eventIndex!.blocksOf('w').sort()).toEqual(reference.eventIndex!.blocksOf('w').sort());
  });
});
