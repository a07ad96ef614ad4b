import { mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileDiscovery, createDiscovery } from '../../runtime/discovery/index.js';
import { EventRecorder, sleep, waitFor } from '../fixtures/discovery-events.js';
import { spawnDiscoveryChild } from '../fixtures/discovery-spawn.js';
import { discoveryContract } from './discovery.contract.js';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tandem-filedisc-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

discoveryContract('file', () => ({
  open: () => createDiscovery('file', { directory: dir, ttlSeconds: 5, pollIntervalMs: 200 }),
  propagationMs: 500,
}));

describe('file discovery', () => {
  it('writes one JSON file per key, named by the encoded key, with the writer’s id and TTL', async () => {
    const d = await FileDiscovery.open({ directory: join(dir, 'layout'), ttlSeconds: 4 });
    await d.put('v1/instances/tandem/backend/generate/abc', { address: 'h:1' });
    const names = (await readdir(d.directory)).filter((n) => !n.startsWith('.'));
    expect(names).toEqual(['v1%2Finstances%2Ftandem%2Fbackend%2Fgenerate%2Fabc.json']);
    const envelope = JSON.parse(await readFile(join(d.directory, names[0]!), 'utf8'));
    expect(envelope).toEqual({
      key: 'v1/instances/tandem/backend/generate/abc',
      instanceId: d.instanceId,
      ttlSeconds: 4,
      value: { address: 'h:1' },
    });
    await d.close();
    expect((await readdir(d.directory)).filter((n) => !n.startsWith('.'))).toEqual([]);
  });

  it('a record whose mtime is older than its TTL is invisible to list and removed from watchers', async () => {
    const sub = join(dir, 'expiry');
    const reader = await FileDiscovery.open({ directory: sub, ttlSeconds: 1, pollIntervalMs: 100 });
    // A record of another process that stops heartbeating: written by hand, never touched.
    const file = join(sub, 'svc%2Fa.json');
    await writeFile(file, JSON.stringify({ key: 'svc/a', instanceId: '00000000000000aa', ttlSeconds: 1, value: 1 }));
    const rec = new EventRecorder();
    const handle = await reader.watch('svc/', rec.onEvent);
    expect(rec.lines()).toEqual(['added svc/a=1']);
    const old = new Date(Date.now() - 1500); // expired (ttl 1 s), not yet garbage (3 ttl)
    await utimes(file, old, old);
    expect(await reader.list('svc/')).toEqual([]);
    await waitFor('expiry reaches the watcher', () => !rec.has('svc/a'), 2000);
    expect(rec.lines()).toEqual(['added svc/a=1', 'removed svc/a']);
    // A heartbeat from an owner that came back makes it visible again.
    const now = new Date();
    await utimes(file, now, now);
    await waitFor('revival reaches the watcher', () => rec.has('svc/a'), 2000);
    // Long dead: a scanning process deletes the file.
    const ancient = new Date(Date.now() - 10_000);
    await utimes(file, ancient, ancient);
    await waitFor('garbage collected', async () => !(await readdir(sub)).includes('svc%2Fa.json'), 2000);
    expect(rec.lines()).toEqual(['added svc/a=1', 'removed svc/a', 'added svc/a=1', 'removed svc/a']);
    handle.close();
    await reader.close();
  });

  it('heartbeats keep a live record visible well past its TTL', async () => {
    const sub = join(dir, 'heartbeat');
    const writer = await FileDiscovery.open({ directory: sub, ttlSeconds: 1 });
    const reader = await FileDiscovery.open({ directory: sub, ttlSeconds: 1, pollIntervalMs: 100 });
    await writer.put('hb/x', 'alive');
    const rec = new EventRecorder();
    const handle = await reader.watch('hb/', rec.onEvent);
    await new Promise((r) => setTimeout(r, 2500));
    expect(rec.lines()).toEqual(['added hb/x="alive"']);
    expect(await reader.list('hb/')).toEqual([{ key: 'hb/x', value: 'alive' }]);
    handle.close();
    await Promise.all([writer.close(), reader.close()]);
  });

  it('a record file deleted behind the owner’s back is rewritten by the next heartbeat', async () => {
    const sub = join(dir, 'rewrite');
    const d = await FileDiscovery.open({ directory: sub, ttlSeconds: 1 });
    await d.put('r/x', 7);
    await rm(join(sub, 'r%2Fx.json'));
    expect(await d.list('r/')).toEqual([]);
    await waitFor('rewritten', async () => (await d.list('r/')).length === 1, 2000);
    expect(await d.list('r/')).toEqual([{ key: 'r/x', value: 7 }]);
    await d.close();
  });

  it('ignores temp files and foreign junk in the directory', async () => {
    const sub = join(dir, 'junk');
    const d = await FileDiscovery.open({ directory: sub });
    await writeFile(join(sub, '.tmp-123'), '{"half":');
    await writeFile(join(sub, 'j%2Fbad.json'), 'not json');
    await writeFile(join(sub, 'j%2Fwrongkey.json'), JSON.stringify({ key: 'j/other', instanceId: 'x', ttlSeconds: 10, value: 1 }));
    await d.put('j/good', 1);
    expect(await d.list('j/')).toEqual([{ key: 'j/good', value: 1 }]);
    await d.close();
  });

  it('a process frozen past its TTL loses its lease on waking: onLeaseLost fires, exit code 3', async () => {
    const sub = join(dir, 'frozen');
    const child = spawnDiscoveryChild({ DISCOVERY_KIND: 'file', DISCOVERY_DIR: sub, DISCOVERY_TTL: '1', CHILD_COMPONENT: 'frozen' });
    try {
      const { key } = await child.ready;
      const observer = await FileDiscovery.open({ directory: sub, ttlSeconds: 1 });
      expect((await observer.list('v1/')).map((r) => r.key)).toEqual([key]);
      child.kill('SIGSTOP');
      await sleep(1600);
      expect(await observer.list('v1/')).toEqual([]); // others already see it gone
      child.kill('SIGCONT');
      const { code } = await child.exited;
      expect(code).toBe(3);
      expect(child.events.map((e) => e.event)).toEqual(['ready', 'lease-lost']);
      expect(child.events[1]!.code).toBe('lease_lost');
      await observer.close();
    } finally {
      child.kill('SIGKILL');
    }
  });
});
