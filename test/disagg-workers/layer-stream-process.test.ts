/**
 * Layer-wise streaming across processes: a prefill-side child (fixtures/layer-prefill.ts, the
 * mocker writing and publishing one layer at a time) and this process as the decode side,
 * polling the hand-off's progress slot over UCX tcp and pulling layer slices as they become
 * ready. Faults: the slot closed under a poller, and kill -9 of the prefill mid-stream.
 */
import { afterEach, beforeAll, afterAll, describe, expect, it } from 'vitest';
import { streamLayers } from '../../workers/disagg/layer-ready.js';
import { remoteLayerSource, type RemoteLayerProgress } from '../../workers/disagg/layer-progress-region.js';
import { isUcxBuilt, UcxTransferAgent, type KvPool, type KvTransferDescriptor } from '../../workers/kv-transfer/index.js';
import { spawnTs, type Spawned } from '../harness/processes.js';
import { waitFor } from './helpers.js';

const NUM_LAYERS = 8;

interface Peer {
  proc: Spawned;
  kv: KvTransferDescriptor;
  progress: RemoteLayerProgress;
  blockBytes: number;
  bytesPerLayer: number;
}

async function spawnPrefill(layerMs: number, fill: number): Promise<Peer> {
  const proc = spawnTs('test/disagg-workers/fixtures/layer-prefill.ts', [String(NUM_LAYERS), String(layerMs), String(fill)], { UCX_TLS: 'tcp' });
  const line = await proc.waitForLine(/^\{"kv"/, 20_000);
  return { proc, ...(JSON.parse(line) as Omit<Peer, 'proc'>) };
}

describe.skipIf(!isUcxBuilt())('layer-wise streaming between processes over UCX tcp', () => {
  let agent: UcxTransferAgent;
  let pool: KvPool | undefined;
  const peers: Peer[] = [];

  beforeAll(() => {
    agent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
  });
  afterEach(async () => {
    for (const p of peers.splice(0)) {
      p.proc.kill('SIGKILL');
      await p.proc.exited();
    }
  });
  afterAll(() => {
    agent?.close();
  });

  const localPool = (peer: Peer): KvPool => (pool ??= agent.allocatePool({ numBlocks: 8, blockBytes: peer.blockBytes, layout: peer.kv.layout }));
  const blockOf = (p: KvPool, blockBytes: number, id: number) => new Uint8Array(p.buffer as ArrayBuffer).slice(id * blockBytes, (id + 1) * blockBytes);

  it('the decode side polls the remote layer count and copies each layer once, never ahead, while the prefill computes', async () => {
    const peer = await spawnPrefill(25, 40);
    peers.push(peer);
    const local = localPool(peer);
    const source = remoteLayerSource(agent, peer.progress, { intervalMs: 1 });
    try {
      expect(await source.whenBeyond(-1)).toBe(0); // nothing computed yet
      peer.proc.kill('SIGUSR1');
      const into = [1, 3, 4, 6];
      const { copies, readyAtIssue, report } = await streamLayers({
        source,
        copy: async (range) => {
          await agent.pull(peer.kv, local, into, { slice: { offset: range.first * peer.bytesPerLayer, bytes: (range.end - range.first) * peer.bytesPerLayer } });
        },
      });
      await peer.proc.waitForLine(/^\{"done"/, 10_000);
      expect(copies.flatMap((c) => Array.from({ length: c.end - c.first }, (_, i) => c.first + i))).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      copies.forEach((c, i) => expect(c.end).toBeLessThanOrEqual(readyAtIssue[i]!));
      // The first copy went out while later layers were still being computed in the other process.
      expect(readyAtIssue[0]).toBeLessThan(NUM_LAYERS);
      expect(copies.length).toBeGreaterThan(1);
      expect(report.hiddenMs).toBeGreaterThan(0);

      // Equal to one whole-block pull after the prefill.
      const whole = [0, 2, 5, 7];
      await agent.pull(peer.kv, local, whole);
      for (let i = 0; i < 4; i++) {
        const got = blockOf(local, peer.blockBytes, into[i]!);
        expect(Buffer.from(got).equals(Buffer.from(blockOf(local, peer.blockBytes, whole[i]!))), `block ${i}`).toBe(true);
        expect([got[0], got[got.length - 1]]).toEqual([40, 40 + NUM_LAYERS - 1]);
      }

      // The hand-off ends on the prefill side: a poller fails instead of reading a reused slot.
      peer.proc.kill('SIGUSR2');
      await peer.proc.waitForLine(/^\{"closed"/, 5_000);
      await expect(source.whenBeyond(NUM_LAYERS)).rejects.toThrow(/progress slot reused/);
    } finally {
      source.close();
    }
  }, 30_000);

  it('kill -9 of the prefill process mid-stream: the stream rejects and nothing stays in flight', async () => {
    const peer = await spawnPrefill(60, 10);
    peers.push(peer);
    const local = localPool(peer);
    const regions = agent.stats().regions;
    const source = remoteLayerSource(agent, peer.progress, { intervalMs: 1, timeoutMs: 2_000 });
    let copiesDone = 0;
    try {
      peer.proc.kill('SIGUSR1');
      const streaming = streamLayers({
        source,
        copy: async (range) => {
          await agent.pull(peer.kv, local, [1, 3, 4, 6], { slice: { offset: range.first * peer.bytesPerLayer, bytes: (range.end - range.first) * peer.bytesPerLayer }, timeoutMs: 2_000 });
          if (++copiesDone === 1) peer.proc.kill('SIGKILL');
        },
      });
      const err = await streaming.then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect(copiesDone).toBeGreaterThanOrEqual(1);
      expect(copiesDone).toBeLessThan(NUM_LAYERS);
      await waitFor(() => agent.stats().inflightReads === 0, 5_000, 'no reads in flight');
    } finally {
      source.close();
    }
    expect(agent.stats().regions).toBe(regions); // the landing slot went back
  }, 30_000);
});
