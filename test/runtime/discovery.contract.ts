/**
 * The one contract every Discovery backend passes (memory, file, etcd). A backend's test file
 * calls `discoveryContract(name, harness)`; each `open()` is a separate "process" attached to
 * the same registry (shared store, directory, or etcd), so the tests exercise what one process
 * sees of another. Every test works under its own random key prefix.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { Discovery, WatchHandle } from '../../runtime/discovery/index.js';
import { EventRecorder, sleep, waitFor } from '../fixtures/discovery-events.js';

export interface DiscoveryContractHarness {
  /** A new process-like handle on the shared registry. */
  open(): Promise<Discovery>;
  /** Upper bound for a change to reach another handle's watcher (poll-based backends need more). */
  propagationMs: number;
}

export function discoveryContract(name: string, harness: () => DiscoveryContractHarness): void {
  describe(`discovery contract: ${name}`, () => {
    const opened: Discovery[] = [];
    const watches: WatchHandle[] = [];
    let prefix = '';

    const open = async (): Promise<Discovery> => {
      const d = await harness().open();
      opened.push(d);
      return d;
    };
    const settle = (what: string, predicate: () => boolean | Promise<boolean>) =>
      waitFor(what, predicate, harness().propagationMs + 2000);
    const watch = async (d: Discovery, p: string): Promise<EventRecorder> => {
      const rec = new EventRecorder();
      watches.push(await d.watch(p, rec.onEvent));
      return rec;
    };

    afterEach(async () => {
      for (const w of watches.splice(0)) w.close();
      await Promise.all(opened.splice(0).map((d) => d.close()));
    });

    const key = (rest: string): string => `${prefix}${rest}`;
    const fresh = (): void => {
      prefix = `contract/${randomUUID()}/`;
    };

    it('gives each process a distinct 16-hex-digit instance id and reports its kind', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      expect(a.instanceId).toMatch(/^[0-9a-f]{16}$/);
      expect(b.instanceId).toMatch(/^[0-9a-f]{16}$/);
      expect(a.instanceId).not.toBe(b.instanceId);
      expect(a.kind).toBe(name);
    });

    it('list shows a record another process put', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      await a.put(key('x'), { address: '127.0.0.1:1234' });
      await settle('b to list a/x', async () => (await b.list(prefix)).length === 1);
      expect(await b.list(prefix)).toEqual([{ key: key('x'), value: { address: '127.0.0.1:1234' } }]);
    });

    it('list is sorted by key and stops at the prefix boundary', async () => {
      fresh();
      const a = await open();
      await a.put(key('svc/b'), 2);
      await a.put(key('svc/a'), 1);
      await a.put(key('svc/c/d'), 3);
      await a.put(key('svcx/e'), 4); // shares the string prefix "svc" but not "svc/"
      const listed = await a.list(key('svc/'));
      expect(listed.map((r) => r.key)).toEqual([key('svc/a'), key('svc/b'), key('svc/c/d')]);
      expect(listed.map((r) => r.value)).toEqual([1, 2, 3]);
      expect(await a.list(key('nothing/'))).toEqual([]);
    });

    it('put replaces the value of an existing key', async () => {
      fresh();
      const a = await open();
      await a.put(key('k'), { v: 1 });
      await a.put(key('k'), { v: 2 });
      expect(await a.list(prefix)).toEqual([{ key: key('k'), value: { v: 2 } }]);
    });

    it('delete removes the record, and deleting a missing key is not an error', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      await a.put(key('k'), 'v');
      await a.delete(key('k'));
      await a.delete(key('never-put'));
      await settle('record gone for b', async () => (await b.list(prefix)).length === 0);
      expect(await a.list(prefix)).toEqual([]);
    });

    it('values round-trip as JSON', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      const value = {
        name: 'Qwen3-0.6B ✓ 模型',
        nested: { list: [1, 2.5, -3, null, true, false], empty: {} },
        big: 2 ** 53 - 1,
        id: 'ffffffffffffffff',
      };
      await a.put(key('card'), value);
      const rec = await watch(b, prefix);
      await settle('b to see the card', () => rec.has(key('card')));
      expect(rec.view.get(key('card'))).toEqual(value);
      expect((await b.list(prefix))[0]!.value).toEqual(value);
    });

    it('watch reports existing records first, then adds, value changes and removals', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      await a.put(key('w/1'), 'one');
      const rec = await watch(b, key('w/'));
      await settle('initial record', () => rec.events.length >= 1);
      expect(rec.lines()).toEqual([`added ${key('w/1')}="one"`]);

      await a.put(key('w/2'), 'two');
      await settle('add of w/2', () => rec.has(key('w/2')));
      await a.put(key('w/1'), 'uno');
      await settle('change of w/1', () => rec.view.get(key('w/1')) === 'uno');
      await a.delete(key('w/2'));
      await settle('removal of w/2', () => !rec.has(key('w/2')));
      await a.put(key('other/z'), 'outside the watched prefix');

      // A fence: once a later in-prefix event arrives, the out-of-prefix put had its chance.
      await a.put(key('w/3'), 'fence');
      await settle('fence', () => rec.has(key('w/3')));
      expect(rec.lines()).toEqual([
        `added ${key('w/1')}="one"`,
        `added ${key('w/2')}="two"`,
        `added ${key('w/1')}="uno"`,
        `removed ${key('w/2')}`,
        `added ${key('w/3')}="fence"`,
      ]);
    });

    it('a watcher sees its own process’s puts', async () => {
      fresh();
      const a = await open();
      const rec = await watch(a, prefix);
      await a.put(key('self'), 1);
      await settle('own put', () => rec.has(key('self')));
      expect(rec.lines()).toEqual([`added ${key('self')}=1`]);
    });

    it('a closed watch handle gets no more events, and closing twice is harmless', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      const closedRec = new EventRecorder();
      const handle = await b.watch(prefix, closedRec.onEvent);
      const liveRec = await watch(b, prefix);
      await a.put(key('before'), 1);
      await settle('both see first put', () => closedRec.has(key('before')) && liveRec.has(key('before')));
      handle.close();
      handle.close();
      await a.put(key('after'), 2);
      await settle('live watcher sees second put', () => liveRec.has(key('after')));
      await sleep(100);
      expect(closedRec.lines()).toEqual([`added ${key('before')}=1`]);
    });

    it('close() withdraws every record of the process from other watchers and lists', async () => {
      fresh();
      const [a, b] = [await open(), await open()];
      await a.put(key('inst/1'), { n: 1 });
      await a.put(key('model/1'), { n: 2 });
      await b.put(key('inst/2'), { n: 3 });
      const rec = await watch(b, prefix);
      await settle('three records', () => rec.view.size === 3);
      await a.close();
      await settle('a’s records removed', () => rec.view.size === 1);
      expect([...rec.view.keys()]).toEqual([key('inst/2')]);
      expect((await b.list(prefix)).map((r) => r.key)).toEqual([key('inst/2')]);
      expect(rec.lines().filter((l) => l.startsWith('removed')).sort()).toEqual([`removed ${key('inst/1')}`, `removed ${key('model/1')}`]);
    });

    it('a closed handle rejects put, and close is idempotent', async () => {
      fresh();
      const a = await open();
      await a.close();
      await a.close();
      await expect(a.put(key('late'), 1)).rejects.toMatchObject({ code: 'unavailable' });
    });
  });
}
