/** Semaphore (runtime/semaphore.ts): permits, FIFO hand-over, the waiting bound, idempotent release. */
import { describe, expect, it } from 'vitest';
import { Semaphore, type Release } from '../../runtime/semaphore.js';

describe('Semaphore', () => {
  it('2 permits, 1 waiting slot: the third waits, the fourth is refused; releases hand over in order', async () => {
    const s = new Semaphore(2, 1);
    const a = await s.acquire()!;
    const b = await s.acquire()!;
    const order: string[] = [];
    const c = s.acquire()!.then((r) => (order.push('c'), r));
    expect(s.acquire()).toBeUndefined();
    expect({ inUse: s.inUse, waiting: s.waiting }).toEqual({ inUse: 2, waiting: 1 });
    a();
    a(); // a second release of the same permit changes nothing
    const rc: Release = await c;
    expect(order).toEqual(['c']);
    expect({ inUse: s.inUse, waiting: s.waiting }).toEqual({ inUse: 2, waiting: 0 });
    b();
    rc();
    expect(s.inUse).toBe(0);
  });

  it('refuses fewer than one permit', () => {
    expect(() => new Semaphore(0)).toThrow(RangeError);
  });
});
