/**
 * etcd outages seen from a serving process (test/fixtures/discovery-child.ts, lease TTL 3 s):
 *  - shorter than the TTL (etcd killed and restarted, or hung with SIGSTOP): the process keeps
 *    its registration, under the same instance id, and never exits;
 *  - longer than the TTL: onLeaseLost fires and the process exits with code 3. After etcd
 *    returns, the dead process's record does not linger past one more TTL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdDiscovery, instancePrefix } from '../../runtime/discovery/index.js';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { EventRecorder, sleep, waitFor } from '../fixtures/discovery-events.js';
import { spawnDiscoveryChild, type DiscoveryChild } from '../fixtures/discovery-spawn.js';

const TTL_SECONDS = 3;

let etcd: EtcdServer;
beforeAll(async () => {
  etcd = await startEtcd();
});
afterAll(async () => {
  await etcd?.stop();
});

async function listKeys(component: string): Promise<string[]> {
  const observer = await EtcdDiscovery.connect({ endpoints: [etcd.endpoint], ttlSeconds: 5 });
  try {
    return (await observer.list(instancePrefix('tandem', component))).map((r) => r.key);
  } finally {
    await observer.close();
  }
}

async function startChild(component: string): Promise<{ child: DiscoveryChild; key: string }> {
  const child = spawnDiscoveryChild({
    DISCOVERY_KIND: 'etcd',
    ETCD_ENDPOINTS: etcd.endpoint,
    DISCOVERY_TTL: String(TTL_SECONDS),
    CHILD_COMPONENT: component,
  });
  const { key } = await child.ready;
  expect(await listKeys(component)).toEqual([key]);
  return { child, key };
}

async function expectStillServing(child: DiscoveryChild, component: string, key: string): Promise<void> {
  await waitFor('registration visible again', async () => (await listKeys(component)).includes(key), 3000, 100);
  // Past a full TTL after the outage: the lease is really being renewed, not merely extended
  // by etcd's restart.
  await sleep(TTL_SECONDS * 1000 + 500);
  expect(await listKeys(component)).toEqual([key]);
  expect(child.proc.running).toBe(true);
  expect(child.events.map((e) => e.event)).toEqual(['ready']);
}

describe('etcd restart', () => {
  it('an outage shorter than the TTL (kill + restart) keeps the registration and the process', async () => {
    const component = `restart-short-${Date.now()}`;
    const { child, key } = await startChild(component);
    try {
      const down = Date.now();
      await etcd.kill();
      await sleep(400);
      await etcd.restart(); // ~0.4 s to healthy here
      const outageMs = Date.now() - down;
      expect(outageMs).toBeLessThan(TTL_SECONDS * 1000);
      await expectStillServing(child, component, key);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('a hung etcd (SIGSTOP) for less than the TTL keeps the registration and the process', async () => {
    const component = `restart-hung-${Date.now()}`;
    const { child, key } = await startChild(component);
    try {
      // Keep-alive runs every TTL/3, so the last ack may be 1 s old when the pause starts.
      etcd.pause();
      await sleep(1000);
      etcd.resume();
      await expectStillServing(child, component, key);
    } finally {
      etcd.resume();
      child.kill('SIGKILL');
    }
  });

  it('an outage longer than the TTL fires onLeaseLost and the process exits with code 3', async () => {
    const component = `restart-long-${Date.now()}`;
    const { child, key } = await startChild(component);
    try {
      const down = Date.now();
      await etcd.kill();
      const { code } = await Promise.race([
        child.exited,
        sleep(TTL_SECONDS * 1000 + 3000).then(() => {
          throw new Error(`child still running ${TTL_SECONDS + 3} s into the outage`);
        }),
      ]);
      const exitAfterMs = Date.now() - down;
      expect(code).toBe(3);
      expect(child.events.map((e) => e.event)).toEqual(['ready', 'lease-lost']);
      expect(child.events[1]!.code).toBe('lease_lost');
      expect(exitAfterMs).toBeGreaterThanOrEqual(TTL_SECONDS * 1000 - 1000);

      // etcd comes back and extends surviving leases once; nobody renews this one, so the
      // record is gone within one more TTL.
      await etcd.restart();
      await waitFor('dead instance expired', async () => (await listKeys(component)).length === 0, TTL_SECONDS * 1000 + 2000, 200);
      expect(await listKeys(component)).not.toContain(key);
    } finally {
      child.kill('SIGKILL');
      if (etcd.pid === undefined) await etcd.restart();
    }
  });

  it('a watch resumes after etcd restarts and reports the changes made after it', async () => {
    const prefix = `restart-watch-${Date.now()}/`;
    const observer = await EtcdDiscovery.connect({ endpoints: [etcd.endpoint], ttlSeconds: 6 });
    const writer = await EtcdDiscovery.connect({ endpoints: [etcd.endpoint], ttlSeconds: 6 });
    const rec = new EventRecorder();
    const handle = await observer.watch(prefix, rec.onEvent);
    try {
      await writer.put(`${prefix}a`, 1);
      await waitFor('first put', () => rec.has(`${prefix}a`), 2000);
      await etcd.kill();
      await etcd.restart();
      await waitFor('writer can write again', () => writer.put(`${prefix}b`, 2).then(() => true, () => false), 5000, 200);
      await writer.delete(`${prefix}a`);
      await waitFor('changes after restart', () => rec.has(`${prefix}b`) && !rec.has(`${prefix}a`), 5000);
      expect(rec.lines()).toEqual([`added ${prefix}a=1`, `added ${prefix}b=2`, `removed ${prefix}a`]);
    } finally {
      handle.close();
      await Promise.all([observer.close(), writer.close()]);
    }
  });
});
