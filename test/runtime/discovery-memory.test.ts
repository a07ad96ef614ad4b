import { describe, expect, it } from 'vitest';
import { MemoryDiscovery, MemoryDiscoveryStore, createDiscovery } from '../../runtime/discovery/index.js';
import { EventRecorder, waitFor } from '../fixtures/discovery-events.js';
import { discoveryContract } from './discovery.contract.js';

let store = new MemoryDiscoveryStore();
discoveryContract('memory', () => ({
  open: () => createDiscovery('memory', { memoryStore: store }),
  propagationMs: 0,
}));

describe('memory discovery', () => {
  it('handles on one store see each other; handles on different stores do not', async () => {
    store = new MemoryDiscoveryStore();
    const a = new MemoryDiscovery({ store });
    const b = new MemoryDiscovery({ store });
    const loner = new MemoryDiscovery();
    await a.put('k/a', 1);
    expect(await b.list('k/')).toEqual([{ key: 'k/a', value: 1 }]);
    expect(await loner.list('k/')).toEqual([]);
    await Promise.all([a.close(), b.close(), loner.close()]);
  });

  it('revokeLease drops the records and fires onLeaseLost exactly once, even for late subscribers', async () => {
    const shared = new MemoryDiscoveryStore();
    const worker = new MemoryDiscovery({ store: shared });
    const watcher = new MemoryDiscovery({ store: shared });
    const rec = new EventRecorder();
    await watcher.watch('v1/', rec.onEvent);
    await worker.put('v1/instances/tandem/backend/generate/x', { ok: true });
    await waitFor('record seen', () => rec.view.size === 1);

    const causes: Error[] = [];
    worker.onLeaseLost((c) => causes.push(c));
    expect(shared.revokeLease(worker.instanceId)).toBe(true);
    expect(shared.revokeLease(worker.instanceId)).toBe(false);
    await waitFor('removal seen', () => rec.view.size === 0);
    await waitFor('callback ran', () => causes.length === 1);

    const late: Error[] = [];
    worker.onLeaseLost((c) => late.push(c));
    await waitFor('late callback ran', () => late.length === 1);
    expect(causes[0]).toBe(late[0]);
    expect(causes).toHaveLength(1);
    await expect(worker.put('v1/again', 1)).rejects.toMatchObject({ code: 'lease_lost', name: 'LeaseLostError' });
    await Promise.all([worker.close(), watcher.close()]);
  });

  it('stores a copy: mutating a value after put changes nothing', async () => {
    const d = new MemoryDiscovery();
    const value = { n: 1 };
    await d.put('k', value);
    value.n = 2;
    const [first] = await d.list<{ n: number }>('k');
    first!.value.n = 3;
    expect(await d.list('k')).toEqual([{ key: 'k', value: { n: 1 } }]);
    await d.close();
  });
});
