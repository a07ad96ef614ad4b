/**
 * Two UCX agents in two processes: this test process pulls from a peer child
 * (fixtures/ucx-peer.ts) over tcp and over shared memory. Needs the addon
 * (`node native/ucx/build.js`) and Debian's libucx.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTs, type Spawned } from '../harness/processes.js';
import {
  KvTransferError,
  UcxTransferAgent,
  type KvPool,
  type KvTransferDescriptor,
} from '../../workers/kv-transfer/index.js';
import { blockMatches } from './fixtures/pattern.js';

const BLOCK_BYTES = 64 * 1024;
const NUM_BLOCKS = 64;
const LAYOUT = 'test-layout';

interface Peer {
  proc: Spawned;
  pid: number;
  descriptor: KvTransferDescriptor;
}

async function startPeer(tls: string, seed: number, mode: 'allocate' | 'register'): Promise<Peer> {
  const proc = spawnTs('test/kv-transfer/fixtures/ucx-peer.ts', [String(NUM_BLOCKS), String(BLOCK_BYTES), String(seed), mode], {
    UCX_TLS: tls,
  });
  const line = await proc.waitForLine(/^\{"pid"/, 20_000);
  const { pid, descriptor } = JSON.parse(line) as { pid: number; descriptor: KvTransferDescriptor };
  return { proc, pid, descriptor };
}

async function stopPeer(peer: Peer): Promise<void> {
  peer.proc.kill('SIGTERM');
  await peer.proc.exited();
}

function poolBytes(pool: KvPool): ArrayBuffer {
  return pool.buffer instanceof ArrayBuffer ? pool.buffer : (pool.buffer.buffer as ArrayBuffer);
}

/** Every local block in `mapping` holds its remote block's pattern; every other block is zero. */
function expectBlocks(pool: KvPool, mapping: Map<number, number>, seed: number): void {
  const buffer = poolBytes(pool);
  const scratch = new Uint32Array(BLOCK_BYTES / 4);
  const wrong: number[] = [];
  for (const [local, remote] of mapping) {
    if (!blockMatches(buffer, BLOCK_BYTES, local, remote, seed, scratch)) wrong.push(local);
  }
  expect(wrong, 'local blocks whose bytes differ from the remote block').toEqual([]);
  const untouched = new Uint8Array(buffer);
  for (let b = 0; b < NUM_BLOCKS; b++) {
    if (mapping.has(b)) continue;
    const view = untouched.subarray(b * BLOCK_BYTES, (b + 1) * BLOCK_BYTES);
    expect(view.every((x) => x === 0), `block ${b} should be untouched`).toBe(true);
  }
}

/** SIGSTOP, then wait until the kernel reports every thread of `pid` stopped. */
async function freeze(pid: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  const stopped = () => {
    try {
      return readdirSync(`/proc/${pid}/task`).every((tid) => {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        return /^\d+ \(.*\) [Tt] /.test(stat);
      });
    } catch {
      return false;
    }
  };
  await waitFor(stopped, 5_000);
  expect(stopped(), `peer ${pid} stopped`).toBe(true);
}

async function waitFor(cond: () => boolean, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond() && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
}

const TRANSPORTS = [
  { name: 'tcp', tls: 'tcp' },
  { name: 'shared memory', tls: 'sm,self' },
];

describe.each(TRANSPORTS)('UCX transfer over $name', ({ tls }) => {
  let agent: UcxTransferAgent;
  let pool: KvPool;

  beforeAll(() => {
    agent = UcxTransferAgent.create({ config: { TLS: tls } });
    pool = agent.allocatePool({ numBlocks: NUM_BLOCKS, blockBytes: BLOCK_BYTES, layout: LAYOUT });
  });
  afterAll(() => agent.close());

  const clear = () => new Uint8Array(poolBytes(pool)).fill(0);

  /** Stops the peer; `disconnect` drops our endpoint at once, otherwise UCX must notice. */
  async function retire(peer: Peer, how: 'disconnect' | 'peer exit'): Promise<void> {
    await stopPeer(peer);
    if (how === 'disconnect') agent.disconnect(peer.descriptor.ucxWorkerAddress);
    const idle = () => agent.stats().endpoints === 0 && agent.stats().closingEndpoints === 0;
    await waitFor(idle, 5_000);
    expect(agent.stats(), `endpoint to the stopped peer dropped (${how})`).toMatchObject({ endpoints: 0, closingEndpoints: 0 });
  }

  it.each(['allocate', 'register'] as const)('pulls blocks from a peer process (%s pool) and the bytes match exactly', async (mode) => {
    const seed = mode === 'allocate' ? 11 : 12;
    const peer = await startPeer(tls, seed, mode);
    try {
      clear();
      // Remote 5..20 -> local 0..15 (one get), remote 40,41 -> local 30,31 (one), 63 -> 50 (one).
      const remote = [...Array.from({ length: 16 }, (_, i) => 5 + i), 40, 41, 63];
      const local = [...Array.from({ length: 16 }, (_, i) => i), 30, 31, 50];
      const descriptor = { ...peer.descriptor, blockIds: remote };
      const result = await agent.pull(descriptor, pool, local);
      expect(result.bytes).toBe(remote.length * BLOCK_BYTES);
      expect(result.ranges).toBe(3);
      expect(result.blocks).toBe(19);
      expectBlocks(pool, new Map(local.map((l, i) => [l, remote[i]!])), seed);
      expect(agent.stats().endpoints).toBe(1);
    } finally {
      // The peer's exit alone must drop the endpoint: tcp sees the socket close, shared
      // memory finds out through keep-alive (1 s).
      await retire(peer, 'peer exit');
    }
  });

  it('serves many concurrent pulls on one cached endpoint', async () => {
    const seed = 21;
    const peer = await startPeer(tls, seed, 'allocate');
    try {
      clear();
      const before = agent.counters.snapshot();
      // 32 pulls of 2 blocks each, remote blocks shuffled against local ones.
      const pulls: Array<Promise<unknown>> = [];
      const mapping = new Map<number, number>();
      for (let i = 0; i < 32; i++) {
        const remote = [(i * 7) % NUM_BLOCKS, (i * 7 + 1) % NUM_BLOCKS];
        const local = [2 * i, 2 * i + 1];
        mapping.set(local[0]!, remote[0]!).set(local[1]!, remote[1]!);
        pulls.push(agent.pull({ ...peer.descriptor, blockIds: remote }, pool, local));
      }
      await Promise.all(pulls);
      expectBlocks(pool, mapping, seed);
      const after = agent.counters.snapshot();
      expect(after.transfersOk - before.transfersOk).toBe(32);
      expect(after.bytesTotal - before.bytesTotal).toBe(64 * BLOCK_BYTES);
      expect(after.inflight).toBe(0);
      expect(agent.stats().inflightReads).toBe(0);
    } finally {
      await retire(peer, 'disconnect');
    }
  });

  it('refuses a pull across KV layouts before touching the wire', async () => {
    const peer = await startPeer(tls, 31, 'allocate');
    try {
      const descriptor = { ...peer.descriptor, layout: 'other-layout', blockIds: [0] };
      await expect(agent.pull(descriptor, pool, [0])).rejects.toMatchObject({ code: 'invalid_argument' });
      await expect(agent.pull({ ...peer.descriptor, blockIds: [0] }, pool, [NUM_BLOCKS])).rejects.toMatchObject({
        code: 'invalid_argument',
      });
    } finally {
      await retire(peer, 'disconnect');
    }
  });

  it('a pull to a peer that stops answering fails with deadline_exceeded and drops the endpoint', async () => {
    const stuck = await startPeer(tls, 51, 'register');
    try {
      await agent.pull({ ...stuck.descriptor, blockIds: [1] }, pool, [1]);
      await freeze(stuck.pid);
      const started = Date.now();
      const pending = agent.pull({ ...stuck.descriptor, blockIds: [2, 3] }, pool, [2, 3], { timeoutMs: 300 });
      // UCX may still write into the pool: releasing it now must be refused.
      expect(() => agent.releasePool(pool)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
      await expect(pending).rejects.toMatchObject({ name: 'KvTransferError', code: 'deadline_exceeded' });
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(Date.now() - started).toBeLessThan(3_000);
      await waitFor(() => agent.stats().endpoints === 0 && agent.stats().closingEndpoints === 0, 3_000);
      expect(agent.stats()).toMatchObject({ endpoints: 0, closingEndpoints: 0, inflightReads: 0 });
    } finally {
      process.kill(stuck.pid, 'SIGCONT');
      await stopPeer(stuck);
    }
  });

  it('kill -9 of the peer mid-pull fails the pull typed (unavailable at once over tcp), leaks no endpoint, and a new peer works', async () => {
    // A registered (not UCX-allocated) pool is served by the peer's progress thread, so a
    // stopped peer holds the pull in flight until it is killed.
    const dying = await startPeer(tls, 41, 'register');
    const all = Array.from({ length: NUM_BLOCKS }, (_, i) => i);
    // Warm the endpoint so the kill lands on an established connection.
    await agent.pull({ ...dying.descriptor, blockIds: [0] }, pool, [0]);
    await freeze(dying.pid);
    let settled = false;
    // The deadline is a backstop: over shared memory a dead peer is found by UCX keep-alive,
    // which once (in ~10 full-suite runs under load) did not fire before a 30 s deadline. Either
    // way the pull must fail typed, leak no endpoint, and leave the agent usable.
    const pending = agent.pull({ ...dying.descriptor, blockIds: all }, pool, all, { timeoutMs: 10_000 }).finally(() => {
      settled = true;
    });
    pending.catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    expect(settled, 'the pull should still be in flight while the peer is stopped').toBe(false);
    const killedAt = Date.now();
    process.kill(dying.pid, 'SIGKILL');
    const error = await pending.then(
      () => undefined,
      (err: unknown) => err,
    );
    const elapsed = Date.now() - killedAt;
    expect(error).toBeInstanceOf(KvTransferError);
    const code = (error as KvTransferError).code;
    if (tls === 'tcp') {
      // a socket transport sees the reset at once
      expect(code).toBe('unavailable');
      expect(elapsed).toBeLessThan(5_000);
    } else {
      expect(['unavailable', 'deadline_exceeded']).toContain(code);
      expect(elapsed).toBeLessThan(11_000);
    }
    await dying.proc.exited();

    await waitFor(() => agent.stats().endpoints === 0 && agent.stats().closingEndpoints === 0, 3_000);
    expect(agent.stats()).toMatchObject({ endpoints: 0, closingEndpoints: 0, inflightReads: 0 });
    expect(agent.counters.snapshot().failuresByCode[code]).toBeGreaterThanOrEqual(1);

    const seed = 42;
    const fresh = await startPeer(tls, seed, 'allocate');
    try {
      clear();
      await agent.pull({ ...fresh.descriptor, blockIds: all }, pool, all);
      expectBlocks(pool, new Map(all.map((b) => [b, b])), seed);
      expect(agent.stats().endpoints).toBe(1);
    } finally {
      await retire(fresh, 'disconnect');
    }
  });
});

describe('UcxTransferAgent lifecycle', () => {
  it('close() rejects pending pulls with unavailable and detaches allocated pools', async () => {
    const agent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
    const pool = agent.allocatePool({ numBlocks: 4, blockBytes: 4096, layout: LAYOUT });
    expect(pool.buffer instanceof ArrayBuffer && pool.buffer.byteLength).toBe(4 * 4096);
    expect(agent.stats().regions).toBe(1);
    agent.close();
    expect((pool.buffer as ArrayBuffer).byteLength).toBe(0);
    await expect(agent.pull({ ...agent.describe(pool, [0]) }, pool, [0])).rejects.toMatchObject({ code: 'unavailable' });
    expect(() => agent.allocatePool({ numBlocks: 1, blockBytes: 16, layout: LAYOUT })).toThrow(
      expect.objectContaining({ code: 'unavailable' }),
    );
  });

  it('releasePool() frees a pool and detaches its buffer', () => {
    const agent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
    try {
      const pool = agent.allocatePool({ numBlocks: 2, blockBytes: 4096, layout: LAYOUT });
      agent.releasePool(pool);
      expect((pool.buffer as ArrayBuffer).byteLength).toBe(0);
      expect(agent.stats().regions).toBe(0);
    } finally {
      agent.close();
    }
  });
});
