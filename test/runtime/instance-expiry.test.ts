/**
 * A serving process killed with SIGKILL cannot deregister. Its instance must still leave every
 * watcher's view within TTL + 2 s: etcd expires its lease, the file backend sees its mtime age.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDiscovery, instancePrefix, type Discovery } from '../../runtime/discovery/index.js';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { EventRecorder, waitFor } from '../fixtures/discovery-events.js';
import { spawnDiscoveryChild } from '../fixtures/discovery-spawn.js';

const TTL_SECONDS = 2;

async function expectExpiryAfterKill9(observer: Discovery, childEnv: Record<string, string>): Promise<void> {
  const component = `expiry-${process.pid}-${Date.now()}`;
  const rec = new EventRecorder();
  const handle = await observer.watch(instancePrefix('tandem', component), rec.onEvent);
  const child = spawnDiscoveryChild({ ...childEnv, DISCOVERY_TTL: String(TTL_SECONDS), CHILD_COMPONENT: component });
  try {
    const { key, instanceId } = await child.ready;
    await waitFor('child instance in the watcher view', () => rec.has(key), 3000);
    expect(rec.view.get(key)).toMatchObject({ instanceId, component, endpoint: 'generate' });

    const killedAt = Date.now();
    child.kill('SIGKILL');
    expect((await child.exited).signal).toBe('SIGKILL');
    const limitMs = TTL_SECONDS * 1000 + 2000;
    await waitFor('instance removed from the watcher view', () => !rec.has(key), limitMs + 500);
    const removedAfterMs = rec.firstRemovalOf(key)! - killedAt;
    expect(removedAfterMs).toBeLessThanOrEqual(limitMs);
    expect(await observer.list(instancePrefix('tandem', component))).toEqual([]);
  } finally {
    handle.close();
    child.kill('SIGKILL');
  }
}

describe('instance expiry after kill -9', () => {
  describe('etcd', () => {
    let etcd: EtcdServer;
    let observer: Discovery;
    beforeAll(async () => {
      etcd = await startEtcd();
      observer = await createDiscovery('etcd', { etcdEndpoints: [etcd.endpoint], ttlSeconds: 5 });
    });
    afterAll(async () => {
      await observer?.close();
      await etcd?.stop();
    });

    it(`the instance leaves the watcher's view within TTL (${TTL_SECONDS} s) + 2 s`, async () => {
      await expectExpiryAfterKill9(observer, { DISCOVERY_KIND: 'etcd', ETCD_ENDPOINTS: etcd.endpoint });
    });
  });

  describe('file', () => {
    let dir: string;
    let observer: Discovery;
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'tandem-expiry-'));
      observer = await createDiscovery('file', { directory: dir, ttlSeconds: 5 });
    });
    afterAll(async () => {
      await observer?.close();
      await rm(dir, { recursive: true, force: true });
    });

    it(`the instance leaves the watcher's view within TTL (${TTL_SECONDS} s) + 2 s`, async () => {
      await expectExpiryAfterKill9(observer, { DISCOVERY_KIND: 'file', DISCOVERY_DIR: dir });
    });
  });
});
