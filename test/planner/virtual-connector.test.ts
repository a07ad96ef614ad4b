/**
 * The virtual connector over real discovery stores: the planner's handle writes each decision
 * under `v1/planner/{ns}/decisions/{id}`, a second handle (the executor, as another process
 * would) acknowledges under `v1/planner/{ns}/acks/{id}`. Memory (two handles on one store) and
 * file (two handles on one directory, polling).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectorError, decisionsPrefix, runVirtualExecutor, VirtualConnector, type Decision, type VirtualDecision } from '../../planner/index.js';
import { FileDiscovery, MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/index.js';
import type { Discovery } from '../../runtime/index.js';

const decision = (over: Partial<Decision>): Decision => ({ pool: 'decode', atMs: 1000, current: 2, desired: 3, target: 3, action: 'up', rule: 'load.up', limitedBy: [], reason: 'KV 0.95 > 0.9 → +1', ...over });

const stores: Array<{ name: string; open: () => Promise<[Discovery, Discovery, () => void]> }> = [
  {
    name: 'memory',
    open: async () => {
      const store = new MemoryDiscoveryStore();
      return [new MemoryDiscovery({ store }), new MemoryDiscovery({ store }), () => undefined];
    },
  },
  {
    name: 'file',
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'planner-virtual-'));
      const a = await FileDiscovery.open({ directory: dir, ttlSeconds: 5, pollIntervalMs: 50 });
      const b = await FileDiscovery.open({ directory: dir, ttlSeconds: 5, pollIntervalMs: 50 });
      return [a, b, () => rmSync(dir, { recursive: true, force: true })];
    },
  },
];

for (const s of stores) {
  describe(`virtual connector over ${s.name} discovery`, () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });
    async function open(): Promise<[Discovery, Discovery]> {
      const [planner, executor, rm] = await s.open();
      cleanups.push(rm, () => planner.close(), () => executor.close());
      return [planner, executor];
    }

    it('writes the decision with an id, waits for the ack, and takes the replicas it reports', async () => {
      const [pd, ed] = await open();
      const seen: VirtualDecision[] = [];
      const exec = await runVirtualExecutor(ed, 'tandem', async (d) => {
        seen.push(d);
        // the decision is in the store while it waits
        expect((await ed.list(decisionsPrefix('tandem'))).map((r) => r.key)).toEqual([`v1/planner/tandem/decisions/${d.id}`]);
        return d.target === 5 ? 4 : d.target; // 5 asked, 4 reached: the connector adopts 4
      });
      cleanups.push(() => exec.close());
      const c = new VirtualConnector({ discovery: pd, namespace: 'tandem', initial: { decode: 2 }, ackTimeoutMs: 20_000 });
      expect(await c.replicas('decode')).toBe(2);
      await c.scale('decode', 3, decision({}));
      expect(await c.replicas('decode')).toBe(3);
      expect(seen[0]).toMatchObject({ pool: 'decode', target: 3, current: 2, rule: 'load.up', reason: 'KV 0.95 > 0.9 → +1', atMs: 1000 });
      expect(seen[0]!.id).toMatch(/^1000-decode-[0-9a-f]{8}$/);
      await c.scale('decode', 5, decision({ current: 3, target: 5 }));
      expect(await c.replicas('decode')).toBe(4);
      // acknowledged decisions are removed
      expect(await pd.list(decisionsPrefix('tandem'))).toEqual([]);
    });

    it('a rejecting executor and a missing one are typed errors; the count stays', async () => {
      const [pd, ed] = await open();
      const exec = await runVirtualExecutor(ed, 'tandem', () => {
        throw new Error('no GPUs left');
      });
      const c = new VirtualConnector({ discovery: pd, namespace: 'tandem', initial: { decode: 2 }, ackTimeoutMs: 20_000 });
      const rejected = await c.scale('decode', 3, decision({})).catch((e: unknown) => e);
      expect(rejected).toBeInstanceOf(ConnectorError);
      expect((rejected as ConnectorError).kind).toBe('rejected');
      expect((rejected as ConnectorError).message).toContain('no GPUs left');
      exec.close();
      const quick = new VirtualConnector({ discovery: pd, namespace: 'other', initial: { decode: 2 }, ackTimeoutMs: 300 });
      const timeout = await quick.scale('decode', 3, decision({})).catch((e: unknown) => e);
      expect((timeout as ConnectorError).kind).toBe('timeout');
      expect(await c.replicas('decode')).toBe(2);
      expect(await quick.replicas('decode')).toBe(2);
      expect(await pd.list(decisionsPrefix('other'))).toEqual([]);
    });
  });
}
