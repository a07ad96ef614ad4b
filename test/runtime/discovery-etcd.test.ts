import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdDiscovery, createDiscovery, formatInstanceId } from '../../runtime/discovery/index.js';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { freePort } from '../harness/ports.js';
import { EventRecorder, waitFor } from '../fixtures/discovery-events.js';
import { discoveryContract } from './discovery.contract.js';

let etcd: EtcdServer;
let admin: Etcd3;
beforeAll(async () => {
  etcd = await startEtcd();
  admin = new Etcd3({ hosts: etcd.endpoint });
});
afterAll(async () => {
  admin?.close();
  await etcd?.stop();
});

discoveryContract('etcd', () => ({
  open: () => createDiscovery('etcd', { etcdEndpoints: [etcd.endpoint], ttlSeconds: 5 }),
  propagationMs: 200,
}));

describe('etcd discovery', () => {
  it('uses the lease id as the instance id and puts every record under that lease', async () => {
    const d = await EtcdDiscovery.connect({ endpoints: [etcd.endpoint], ttlSeconds: 5 });
    await d.put('lease-check/a', { x: 1 });
    const res = await admin.get('lease-check/a').exec();
    expect(res.kvs).toHaveLength(1);
    expect(res.kvs[0]!.lease).toBe(d.leaseId);
    expect(formatInstanceId(BigInt(res.kvs[0]!.lease))).toBe(d.instanceId);
    const ttl = await admin.leaseClient.leaseTimeToLive({ ID: d.leaseId });
    expect(Number(ttl.grantedTTL)).toBe(5);
    await d.close();
    // close() revokes: the record is gone at once, not after the TTL.
    expect((await admin.get('lease-check/a').exec()).kvs).toHaveLength(0);
  });

  it('rejects with a typed unavailable error when etcd cannot be reached', async () => {
    const port = await freePort();
    const started = Date.now();
    await expect(
      EtcdDiscovery.connect({ endpoints: [`http://127.0.0.1:${port}`], connectTimeoutMs: 600, ttlSeconds: 3 }),
    ).rejects.toMatchObject({ code: 'unavailable', name: 'UnavailableError' });
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('a lease revoked behind its back is re-granted with the same id and its records restored', async () => {
    const d = await EtcdDiscovery.connect({ endpoints: [etcd.endpoint], ttlSeconds: 3 });
    const lost: Error[] = [];
    d.onLeaseLost((c) => lost.push(c));
    await d.put('regrant/inst', { alive: true });
    const rec = new EventRecorder();
    const watcher = await admin.watch().prefix('regrant/').create();
    watcher.on('delete', (kv) => rec.onEvent({ type: 'removed', key: kv.key.toString() }));
    watcher.on('put', (kv) => rec.onEvent({ type: 'added', key: kv.key.toString(), value: JSON.parse(kv.value.toString()) }));

    await admin.leaseClient.leaseRevoke({ ID: d.leaseId });
    await waitFor('revocation seen', () => rec.firstRemovalOf('regrant/inst') !== undefined, 2000);
    await waitFor('record restored', () => rec.has('regrant/inst'), 3000);
    const res = await admin.get('regrant/inst').exec();
    expect(res.kvs[0]!.lease).toBe(d.leaseId);
    expect(lost).toEqual([]);
    await watcher.cancel();
    await d.close();
  });

  it('createDiscovery rejects a fractional etcd TTL with a config error', async () => {
    await expect(createDiscovery('etcd', { etcdEndpoints: [etcd.endpoint], ttlSeconds: 2.5 })).rejects.toMatchObject({
      code: 'config_invalid',
    });
  });
});
