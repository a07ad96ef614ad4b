/**
 * Layer-wise streaming (workers/disagg/layer-stream.ts, layer-ready.ts): the planner's
 * invariants, the hidden-copy arithmetic, and the whole protocol with the mocker publishing
 * per-layer readiness while its prefill step runs and the decode side pulling layer slices of
 * the blocks over real UCX (tcp) as they become ready.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LayerProgressBoard, layersReadyForPass, mockerLayerHook, streamLayers } from '../../workers/disagg/layer-ready.js';
import { LayerCopyPlanner, hiddenCopyReport, type LayerRange } from '../../workers/disagg/layer-stream.js';
import type { StepBatch, StepSequence } from '../../workers/engines/engine.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { formatLayoutName, isUcxBuilt, layerBytes, layoutBlockBytes, UcxTransferAgent, type KvLayoutDescriptor, type KvPool } from '../../workers/kv-transfer/index.js';

describe('LayerCopyPlanner', () => {
  it('worked example: ready 1, then 3 while [0,1) copies, then 4 → [0,1), [1,3), [3,4)', () => {
    const p = new LayerCopyPlanner({ numLayers: 4 });
    expect(p.next(0)).toBeUndefined();
    const a = p.next(1)!;
    expect(a).toEqual({ first: 0, end: 1 });
    expect(p.next(3)).toBeUndefined(); // one copy in flight at a time
    p.landed(a);
    const b = p.next(3)!;
    expect(b).toEqual({ first: 1, end: 3 });
    p.landed(b);
    expect(p.next(3)).toBeUndefined();
    const c = p.next(4)!;
    p.landed(c);
    expect(c).toEqual({ first: 3, end: 4 });
    expect(p.done).toBe(true);
    expect(() => p.landed(c)).toThrow(/landed but/);
  });

  it('for any readiness schedule: no range passes readiness, every layer is copied once, in order', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 200 }),
        fc.option(fc.integer({ min: 1, max: 8 }), { nil: undefined }),
        (numLayers, events, maxLayersPerCopy) => {
          const p = new LayerCopyPlanner({ numLayers, ...(maxLayersPerCopy !== undefined ? { maxLayersPerCopy } : {}) });
          let ready = 0;
          let inFlight: LayerRange | undefined;
          const copied: number[] = [];
          // true: the prefill finishes a layer; false: the copy in flight lands. Then drain.
          const steps = [...events, ...Array<boolean>(numLayers * 2 + 2).fill(true), ...Array<boolean>(numLayers + 1).fill(false)];
          for (const layerDone of steps) {
            if (layerDone) ready = Math.min(numLayers, ready + 1);
            else if (inFlight) {
              p.landed(inFlight);
              for (let l = inFlight.first; l < inFlight.end; l++) copied.push(l);
              inFlight = undefined;
            }
            const r = p.next(ready);
            if (r) {
              expect(inFlight).toBeUndefined();
              expect(r.end).toBeLessThanOrEqual(ready);
              expect(r.end - r.first).toBeLessThanOrEqual(maxLayersPerCopy ?? numLayers);
              inFlight = r;
            }
            if (!inFlight && p.done) break;
          }
          expect(copied).toEqual(Array.from({ length: numLayers }, (_, i) => i));
        },
      ),
    );
  });
});

describe('hiddenCopyReport', () => {
  it('worked example from the doc comment: 12 ms of copy, 8 hidden, 4 exposed', () => {
    const r = hiddenCopyReport(
      [
        { first: 0, end: 1, startMs: 10, endMs: 14 },
        { first: 1, end: 2, startMs: 20, endMs: 24 },
        { first: 2, end: 3, startMs: 30, endMs: 34 },
      ],
      30,
    );
    expect(r).toEqual({ copyMs: 12, hiddenMs: 8, exposedMs: 4, hiddenFraction: 8 / 12 });
    // The same bytes in one whole-block pull after the prefill: nothing hidden.
    expect(hiddenCopyReport([{ first: 0, end: 3, startMs: 30, endMs: 42 }], 30)).toMatchObject({ hiddenMs: 0, exposedMs: 12, hiddenFraction: 0 });
  });
});

function sequence(seqId: number, tokens: number, startPos: number, numPromptTokens: number, blockTable: number[]): StepSequence {
  return {
    seqId,
    tokenIds: new Int32Array(tokens).fill(7),
    startPos,
    blockTable: Int32Array.from(blockTable),
    sample: startPos + tokens >= numPromptTokens,
    sampling: { temperature: 0 },
    history: [],
    numPromptTokens,
    requestSeed: seqId,
  };
}

describe('mockerLayerHook', () => {
  it('publishes layers only for the chunk that completes a prompt, never for earlier chunks or decodes', async () => {
    const board = new LayerProgressBoard(4);
    const engine = new MockerEngine({ numBlocks: 8, numLayers: 4, onLayers: mockerLayerHook(board), perfModel: { prefillMs: () => 4, decodeMs: () => 1 } });
    const first = sequence(1, 32, 0, 48, [0, 1, 2]); // first chunk of 48
    const other = sequence(2, 16, 0, 16, [3]); // a whole prompt
    const decoding = sequence(3, 1, 20, 20, [4, 5]);
    await engine.step({ sequences: [first, other, decoding] });
    expect(board.source(1).layersReady()).toBe(0);
    expect(board.source(2).layersReady()).toBe(4);
    expect(board.source(3).layersReady()).toBe(0);
    const seen: number[] = [];
    const waiting = (async () => {
      const s = board.source(1);
      for (let have = 0; have < 4; ) seen.push((have = await s.whenBeyond(have)));
    })();
    await engine.step({ sequences: [sequence(1, 16, 32, 48, [0, 1, 2])] });
    await waiting;
    expect(seen.at(-1)).toBe(4);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
  });

  it('native progress [passes begun, layers of the latest]: pass 7 of a 24-layer model', () => {
    expect(layersReadyForPass(BigInt64Array.of(6n, 24n), 7n, 24)).toBe(0); // our pass has not begun
    expect(layersReadyForPass(BigInt64Array.of(7n, 20n), 7n, 24)).toBe(20); // computing layer 20
    expect(layersReadyForPass(BigInt64Array.of(8n, 3n), 7n, 24)).toBe(24); // a later pass began: ours is done
    expect(layersReadyForPass(null, 7n, 24)).toBe(0);
  });

  it('a failed prefill rejects the waiting decode side', async () => {
    const board = new LayerProgressBoard(4);
    const waiting = board.source(9).whenBeyond(0);
    board.failed(9, new Error('cancelled'));
    await expect(waiting).rejects.toThrow('cancelled');
  });
});

const LAYOUT: KvLayoutDescriptor = { order: 'block_major.v1', blockSize: 16, dtype: 'f32', numLayers: 8, numKvHeads: 2, headDim: 8, tp: 1 };
const LAYER_BYTES = layerBytes(LAYOUT);
const BLOCK_BYTES = layoutBlockBytes(LAYOUT);
const LAYER_MS = 15;

describe.skipIf(!isUcxBuilt())('layer-wise streaming: mocker prefill, decode pulls layer slices over UCX tcp', () => {
  let prefillAgent: UcxTransferAgent;
  let decodeAgent: UcxTransferAgent;
  let prefillPool: KvPool;
  let decodePool: KvPool;
  const prefillBlocks = [5, 2, 7, 0];

  beforeAll(() => {
    prefillAgent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
    decodeAgent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
    prefillPool = prefillAgent.allocatePool({ numBlocks: 8, blockBytes: BLOCK_BYTES, layout: formatLayoutName(LAYOUT) });
    decodePool = decodeAgent.allocatePool({ numBlocks: 12, blockBytes: BLOCK_BYTES, layout: formatLayoutName(LAYOUT) });
  });
  afterAll(() => {
    prefillAgent?.close();
    decodeAgent?.close();
  });

  const bytes = (pool: KvPool) => new Uint8Array(pool.buffer as ArrayBuffer);
  const blockOf = (pool: KvPool, id: number) => bytes(pool).slice(id * BLOCK_BYTES, (id + 1) * BLOCK_BYTES);

  /**
   * A prefill of 64 tokens (4 blocks) whose modelled step writes each layer's KV when that
   * layer finishes, then publishes it: what a real engine's per-layer progress promises.
   */
  async function prefillWithLayers(seqId: number, fill: number, board: LayerProgressBoard): Promise<void> {
    const publish = mockerLayerHook(board);
    const engine = new MockerEngine({
      numBlocks: 8,
      numLayers: LAYOUT.numLayers,
      perfModel: { prefillMs: () => LAYER_MS * LAYOUT.numLayers, decodeMs: () => 1 },
      onLayers: (batch: StepBatch, layersDone: number) => {
        const layer = layersDone - 1;
        for (const b of prefillBlocks) bytes(prefillPool).fill(fill + layer, b * BLOCK_BYTES + layer * LAYER_BYTES, b * BLOCK_BYTES + (layer + 1) * LAYER_BYTES);
        publish(batch, layersDone);
      },
    });
    await engine.step({ sequences: [sequence(seqId, 64, 0, 64, prefillBlocks)] });
  }

  it('copies layer 0 while later layers compute; never ahead of readiness; equals a whole-block pull', async () => {
    bytes(prefillPool).fill(0);
    const board = new LayerProgressBoard(LAYOUT.numLayers);
    const descriptor = prefillAgent.describe(prefillPool, prefillBlocks);
    const streamedInto = [1, 3, 4, 6];
    const prefilling = prefillWithLayers(1, 100, board);
    const streamed = await streamLayers({
      source: board.source(1),
      copy: async (range) => {
        await decodeAgent.pull(descriptor, decodePool, streamedInto, { slice: { offset: range.first * LAYER_BYTES, bytes: (range.end - range.first) * LAYER_BYTES } });
      },
    });
    await prefilling;
    const { copies, readyAtIssue, report } = streamed;
    // Every layer once, in order, each range issued only once its layers were ready.
    expect(copies.flatMap((c) => Array.from({ length: c.end - c.first }, (_, i) => c.first + i))).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    copies.forEach((c, i) => expect(c.end).toBeLessThanOrEqual(readyAtIssue[i]!));
    // Streaming happened: layer 0 was on the wire before the prefill's last layer was done.
    expect(copies.length).toBeGreaterThan(1);
    const doneAt = board.source(1).doneAtMs!()!;
    expect(copies[0]!.startMs).toBeLessThan(doneAt);
    expect(report.hiddenMs).toBeGreaterThan(0);
    expect(report.hiddenMs + report.exposedMs).toBeGreaterThanOrEqual(report.copyMs - 1e-9);

    // The reference: one whole-block pull after the prefill, into other blocks.
    const wholeInto = [0, 2, 5, 7];
    await decodeAgent.pull(descriptor, decodePool, wholeInto);
    for (let i = 0; i < 4; i++) {
      const got = blockOf(decodePool, streamedInto[i]!);
      expect(Buffer.from(got).equals(Buffer.from(blockOf(decodePool, wholeInto[i]!))), `block ${i}`).toBe(true);
      expect(got[0]).toBe(100);
      expect(got[BLOCK_BYTES - 1]).toBe(107);
    }
  });

  it('control: copying every layer at once without waiting reads KV that is not written yet', async () => {
    bytes(prefillPool).fill(0);
    const board = new LayerProgressBoard(LAYOUT.numLayers);
    const descriptor = prefillAgent.describe(prefillPool, prefillBlocks);
    const prefilling = prefillWithLayers(2, 50, board);
    await decodeAgent.pull(descriptor, decodePool, [8, 9, 10, 11]); // does not wait for readiness
    await prefilling;
    const early = blockOf(decodePool, 8);
    expect(early[BLOCK_BYTES - 1]).not.toBe(57); // the last layer was still being computed
  });
});
