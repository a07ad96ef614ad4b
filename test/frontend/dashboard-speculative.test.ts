/**
 * The dashboard's acceptance per speculating worker (issue 37): a load report's `spec` counters
 * become the worker's `spec` view, with vLLM's definitions (acceptance = accepted / draft
 * tokens, tokens per verify = 1 + accepted / drafts); workers that do not speculate show none,
 * malformed reports are ignored, a gone worker shows none.
 */
import { describe, expect, it } from 'vitest';
import { DashboardState } from '../../frontend/dashboard/dashboard-state.js';
import { readSpecReport } from '../../frontend/dashboard/fleet.js';

const A = 'aaaaaaaaaaaaaaaa';
const B = 'bbbbbbbbbbbbbbbb';
const load = { numRunning: 0, numWaiting: 0, activeBlocks: 5, totalBlocks: 24 };

function state(): DashboardState {
  return new DashboardState({ instanceId: 'f000000000000000', startedAt: 0, routerMode: 'kv', draining: () => false, inflight: () => 0 });
}

function worker(s: DashboardState, id: string, t: number) {
  return s.view(t).models.flatMap((m) => m.pools.flatMap((p) => p.workers)).find((w) => w.instanceId === id);
}

describe('dashboard fleet: speculative decoding per worker', () => {
  it('40 drafts of 160 tokens with 120 accepted: acceptance 0.75, 4 tokens per verify; none for a worker that does not speculate', () => {
    const s = state();
    s.cardAdded('m', 'agg', A, 24, 1000);
    s.cardAdded('m', 'agg', B, 24, 1000);
    s.load({ workerId: A, ...load, spec: { drafts: 40, draftTokens: 160, acceptedTokens: 120 } }, 1100);
    s.load({ workerId: B, ...load }, 1100);
    expect(worker(s, A, 1100)!.spec).toEqual({ drafts: 40, draftTokens: 160, acceptanceRate: 0.75, meanAcceptedLength: 4 });
    expect(worker(s, B, 1100)).not.toHaveProperty('spec');
    // Before any verify step: no rates.
    s.load({ workerId: B, ...load, spec: { drafts: 0, draftTokens: 0, acceptedTokens: 0 } }, 1200);
    expect(worker(s, B, 1200)!.spec).toEqual({ drafts: 0, draftTokens: 0, acceptanceRate: null, meanAcceptedLength: null });
    s.cardRemoved(A, 1300);
    expect(worker(s, A, 1300)).not.toHaveProperty('spec');
  });

  it('reads only well-formed reports off the wire', () => {
    const ok = { drafts: 3, draftTokens: 9, acceptedTokens: 4 };
    expect(readSpecReport(ok)).toEqual(ok);
    expect(readSpecReport(undefined)).toBeUndefined();
    expect(readSpecReport({ ...ok, drafts: -1 })).toBeUndefined();
    expect(readSpecReport({ ...ok, acceptedTokens: 'x' })).toBeUndefined();
    expect(readSpecReport({ ...ok, extra: 1 })).toEqual(ok);
  });
});
