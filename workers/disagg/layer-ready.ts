/**
 * The layer-ready protocol's moving parts around the pure planner (layer-stream.ts):
 *
 *   prefill side                                     decode side
 *   engine finishes layer l of a step ──▶ LayerProgressBoard.layersDone(seq, l+1)
 *                                           └ source(seq): LayerReadySource ──▶ streamLayers()
 *                                                                                 planner.next(ready)
 *                                                                                 copy(range) … landed
 *                                                                               ◀ report: hidden / exposed ms
 *
 * `LayerReadySource` is the seam: the mocker publishes through a board (`mockerLayerHook`);
 * the native engine's per-layer progress (`layerProgress()`) and a remote prefill's
 * published counter come in through `PolledLayerSource`.
 */
import type { StepBatch } from '../engines/engine.js';
import { LayerCopyPlanner, hiddenCopyReport, type HiddenCopyReport, type LayerRange, type TimedCopy } from './layer-stream.js';

/** How far the prefill side is with one hand-off's KV. */
export interface LayerReadySource {
  readonly numLayers: number;
  /** Layers whose KV for the hand-off's blocks is fully written: 0..numLayers. */
  layersReady(): number;
  /** Resolves with layersReady() once it exceeds `have`; rejects when the hand-off fails. */
  whenBeyond(have: number): Promise<number>;
  /** When the last layer became ready (the driver's clock), if the source knows. */
  doneAtMs?(): number | undefined;
}

interface Progress {
  layers: number;
  doneAtMs?: number;
  error?: unknown;
  waiters: Array<{ have: number; resolve: (n: number) => void; reject: (err: unknown) => void }>;
}

/** Prefill side, in one process: per-sequence layer progress that any number of sources read. */
export class LayerProgressBoard {
  private readonly progress = new Map<number, Progress>();

  constructor(
    readonly numLayers: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `layers` layers of the sequence's prompt KV are written (monotonic; lower values are ignored). */
  layersDone(seqId: number, layers: number): void {
    const p = this.entry(seqId);
    const n = Math.min(this.numLayers, Math.floor(layers));
    if (n <= p.layers) return;
    p.layers = n;
    if (n === this.numLayers) p.doneAtMs = this.now();
    p.waiters = p.waiters.filter((w) => {
      if (n <= w.have) return true;
      w.resolve(n);
      return false;
    });
  }

  /** The sequence's prefill will not finish (cancelled, engine failed): waiting sources reject. */
  failed(seqId: number, error: unknown): void {
    const p = this.entry(seqId);
    p.error = error;
    for (const w of p.waiters) w.reject(error);
    p.waiters = [];
  }

  forget(seqId: number): void {
    this.progress.delete(seqId);
  }

  source(seqId: number): LayerReadySource {
    const entry = () => this.entry(seqId);
    return {
      numLayers: this.numLayers,
      layersReady: () => entry().layers,
      whenBeyond: (have) => {
        const p = entry();
        if (p.layers > have) return Promise.resolve(p.layers);
        if (p.error !== undefined) return Promise.reject(p.error);
        return new Promise((resolve, reject) => p.waiters.push({ have, resolve, reject }));
      },
      doneAtMs: () => entry().doneAtMs,
    };
  }

  private entry(seqId: number): Progress {
    let p = this.progress.get(seqId);
    if (p === undefined) this.progress.set(seqId, (p = { layers: 0, waiters: [] }));
    return p;
  }
}

/**
 * The mocker's publisher (MockerConfig.onLayers): after each modelled layer of a step, every
 * sequence whose prompt this step completes has that many layers ready. Earlier chunks of a
 * chunked prompt count as nothing: the hand-off's KV is whole only in the last chunk's layers.
 */
export function mockerLayerHook(board: LayerProgressBoard): (batch: StepBatch, layersDone: number) => void {
  return (batch, layersDone) => {
    for (const s of batch.sequences) {
      if (s.startPos + s.tokenIds.length >= s.numPromptTokens && s.startPos < s.numPromptTokens) board.layersDone(s.seqId, layersDone);
    }
  };
}

/**
 * A source read by polling: the native engine's per-layer progress, or a counter a remote
 * prefill worker publishes in its registered memory. Polls every `intervalMs` while waited on.
 */
export class PolledLayerSource implements LayerReadySource {
  private last = 0;
  private doneAt: number | undefined;

  constructor(
    readonly numLayers: number,
    private readonly read: () => number | Promise<number>,
    private readonly intervalMs = 0.2,
    private readonly now: () => number = () => performance.now(),
  ) {}

  layersReady(): number {
    return this.last;
  }

  async whenBeyond(have: number): Promise<number> {
    for (;;) {
      const n = Math.min(this.numLayers, await this.read());
      if (n > this.last) this.last = n;
      if (this.last === this.numLayers) this.doneAt ??= this.now();
      if (this.last > have) return this.last;
      await new Promise((r) => setTimeout(r, this.intervalMs));
    }
  }

  doneAtMs(): number | undefined {
    return this.doneAt;
  }
}

/**
 * Layers ready for a hand-off from a native engine's live progress `[passes begun, layers
 * written by the latest pass]` (NativeEngine.layerProgress()), where the hand-off's last
 * prompt chunk ran in pass number `pass` (the passes-begun count once it started): a later
 * pass means all layers are written; that very pass, as many as it wrote; an earlier one, none.
 * Null progress (the backend does not report it) reads as nothing ready: the caller pulls
 * whole blocks after the step instead.
 */
export function layersReadyForPass(progress: ArrayLike<bigint> | null, pass: bigint, numLayers: number): number {
  if (progress === null || progress.length < 2) return 0;
  const begun = progress[0]!;
  if (begun > pass) return numLayers;
  if (begun < pass) return 0;
  return Math.min(numLayers, Math.max(0, Number(progress[1]!)));
}

export interface LayerStreamResult {
  copies: TimedCopy[];
  /** Layers ready when each copy was issued (for checks: range.end ≤ readyAtIssue). */
  readyAtIssue: number[];
  report: HiddenCopyReport;
}

/**
 * Decode side: copies the hand-off layer range by layer range as the source reports them
 * ready; resolves when every layer landed. A copy or source failure rejects (the caller
 * recomputes, as for a failed whole-block pull).
 */
export async function streamLayers(options: {
  source: LayerReadySource;
  copy(range: LayerRange): Promise<void>;
  maxLayersPerCopy?: number;
  now?: () => number;
}): Promise<LayerStreamResult> {
  const { source } = options;
  const now = options.now ?? (() => performance.now());
  const planner = new LayerCopyPlanner({ numLayers: source.numLayers, ...(options.maxLayersPerCopy !== undefined ? { maxLayersPerCopy: options.maxLayersPerCopy } : {}) });
  const copies: TimedCopy[] = [];
  const readyAtIssue: number[] = [];
  let observedDoneMs: number | undefined;
  while (!planner.done) {
    let ready = source.layersReady();
    if (ready >= source.numLayers) observedDoneMs ??= now();
    const range = planner.next(ready);
    if (range === undefined) {
      ready = await source.whenBeyond(planner.copiedLayers);
      continue;
    }
    readyAtIssue.push(ready);
    const startMs = now();
    await options.copy(range);
    copies.push({ ...range, startMs, endMs: now() });
    planner.landed(range);
  }
  const doneMs = source.doneAtMs?.() ?? observedDoneMs ?? now();
  return { copies, readyAtIssue, report: hiddenCopyReport(copies, doneMs) };
}
