/**
 * The dashboard's per-worker KV tiers (issue 25): a load report's `tiers` becomes the worker's
 * `tiers` in the snapshot (occupancy, hit rate per tier over the worker's prefix lookups), only
 * for workers that report them; malformed ones are ignored; a gone worker shows none.
 */
import { describe, expect, it } from 'vitest';
import { DashboardState } from '../../frontend/dashboard/dashboard-state.js';
import { readTierReport } from '../../frontend/dashboard/fleet.js';
import type { LoadTierReport } from '../../proto/wire.js';

const A = 'aaaaaaaaaaaaaaaa';
const B = 'bbbbbbbbbbbbbbbb';

function state(): DashboardState {
  return new DashboardState({ instanceId: 'f000000000000000', startedAt: 0, routerMode: 'kv', draining: () => false, inflight: () => 0 });
}

function worker(s: DashboardState, id: string, t: number) {
  return s.view(t).models.flatMap((m) => m.pools.flatMap((p) => p.workers)).find((w) => w.instanceId === id);
}

const TIERS: LoadTierReport = { hostBlocks: 12, hostCapacity: 64, diskBlocks: 3, diskCapacity: 256, queryTokens: 1000, hitTokens: { device: 400, host: 250, disk: 50 } };
const load = { numRunning: 0, numWaiting: 0, activeBlocks: 5, totalBlocks: 24 };

describe('dashboard fleet: KV tiers per worker', () => {
  it('shows occupancy and the hit rate per tier for a worker that has tiers, nothing for one without', () => {
    const s = state();
    s.cardAdded('m', 'agg', A, 24, 1000);
    s.cardAdded('m', 'agg', B, 24, 1000);
    s.load({ workerId: A, ...load, tiers: TIERS }, 1100);
    s.load({ workerId: B, ...load }, 1100);
    expect(worker(s, A, 1100)!.tiers).toEqual({ hostBlocks: 12, hostCapacity: 64, diskBlocks: 3, diskCapacity: 256, hitRate: { device: 0.4, host: 0.25, disk: 0.05 } });
    expect(worker(s, B, 1100)).not.toHaveProperty('tiers');
    // The snapshot as the stream sends it carries them too.
    const json = JSON.parse(JSON.stringify(s.view(1100))) as ReturnType<DashboardState['view']>;
    expect(json.models[0]!.pools[0]!.workers.find((w) => w.instanceId === A)!.tiers!.hitRate!.host).toBe(0.25);

    // The next report replaces them; before any lookup the rates are null.
    s.load({ workerId: A, ...load, tiers: { ...TIERS, hostBlocks: 20, queryTokens: 2000, hitTokens: { device: 400, host: 1250, disk: 50 } } }, 1200);
    expect(worker(s, A, 1200)!.tiers).toMatchObject({ hostBlocks: 20, hitRate: { device: 0.2, host: 0.625, disk: 0.025 } });
    s.load({ workerId: B, ...load, tiers: { ...TIERS, hostBlocks: 0, queryTokens: 0, hitTokens: { device: 0, host: 0, disk: 0 } } }, 1200);
    expect(worker(s, B, 1200)!.tiers).toMatchObject({ hostBlocks: 0, hostCapacity: 64, hitRate: null });

    // A gone worker shows none.
    s.cardRemoved(A, 1300);
    expect(worker(s, A, 1300)!.state).toBe('gone');
    expect(worker(s, A, 1300)).not.toHaveProperty('tiers');
  });

  it('reads only well-formed tier reports off the wire', () => {
    expect(readTierReport(TIERS)).toEqual(TIERS);
    expect(readTierReport(undefined)).toBeUndefined();
    expect(readTierReport(null)).toBeUndefined();
    expect(readTierReport({ ...TIERS, hitTokens: undefined })).toBeUndefined();
    expect(readTierReport({ ...TIERS, hostBlocks: 'many' })).toBeUndefined();
    expect(readTierReport({ ...TIERS, hitTokens: { device: 1, host: -1, disk: 0 } })).toBeUndefined();
    // Extra fields (a newer worker) are dropped, not passed on to the page.
    expect(readTierReport({ ...TIERS, g4: 1 })).toEqual(TIERS);
  });
});
