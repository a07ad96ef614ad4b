/**
 * The PoolConnector contract (planner/policy/connector.ts), run by every connector: a harness
 * gives a connector over a backend that holds `prefill` at 1 and `decode` at 2 replicas, and can
 * make the backend's next change fail. What the live loop relies on:
 *   - `replicas` reports the backend's count; `scale` resolves once the change is accepted and
 *     `replicas` then reports the target, up, down, to zero and to the same count;
 *   - pools are independent;
 *   - a backend failure rejects with a ConnectorError naming the connector, and the connector
 *     works again on the next call (the loop retries next interval).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConnectorError, type Decision, type PoolConnector, type PoolName } from '../../planner/index.js';

export interface ConnectorHarness {
  connector: PoolConnector;
  /** The count the backend itself holds (the cluster, the executor, the launched processes). */
  backendReplicas(pool: PoolName): number;
  /** Make the backend's next change fail. */
  failNextChange(): void;
  close(): Promise<void>;
}

const decision = (pool: PoolName, current: number, target: number): Decision => ({
  pool,
  atMs: 0,
  current,
  desired: target,
  target,
  action: target > current ? 'up' : target < current ? 'down' : 'hold',
  rule: 'load.up',
  limitedBy: [],
  reason: 'contract',
});

export function poolConnectorContract(kind: PoolConnector['kind'], open: () => Promise<ConnectorHarness>): void {
  describe(`PoolConnector contract: ${kind}`, () => {
    let h: ConnectorHarness;
    beforeEach(async () => {
      h = await open();
    });
    afterEach(async () => {
      await h.close();
    });

    it('names its kind and reports the starting counts', async () => {
      expect(h.connector.kind).toBe(kind);
      expect(await h.connector.replicas('prefill')).toBe(1);
      expect(await h.connector.replicas('decode')).toBe(2);
    });

    it('scale up, down, to zero and to the same count: replicas and the backend follow', async () => {
      for (const [from, to] of [
        [2, 4],
        [4, 3],
        [3, 3],
        [3, 0],
        [0, 1],
      ] as const) {
        await h.connector.scale('decode', to, decision('decode', from, to));
        expect(await h.connector.replicas('decode')).toBe(to);
        expect(h.backendReplicas('decode')).toBe(to);
      }
    });

    it('pools are independent', async () => {
      await h.connector.scale('prefill', 3, decision('prefill', 1, 3));
      expect(await h.connector.replicas('prefill')).toBe(3);
      expect(await h.connector.replicas('decode')).toBe(2);
      expect(h.backendReplicas('decode')).toBe(2);
    });

    it('a failed change rejects with a ConnectorError of this connector, and the next call works', async () => {
      h.failNextChange();
      const err = await h.connector.scale('decode', 5, decision('decode', 2, 5)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectorError);
      expect((err as ConnectorError).connector).toBe(kind);
      await h.connector.scale('decode', 5, decision('decode', 2, 5));
      expect(await h.connector.replicas('decode')).toBe(5);
      expect(h.backendReplicas('decode')).toBe(5);
    });
  });
}
