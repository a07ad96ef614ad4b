/**
 * Layer-wise streaming of a hand-off's KV (issue 24 "Layer-wise streaming"), the pure part:
 * which layer range to copy next given how many layers the prefill side has finished, and how
 * much of the copy time the prefill's compute hid.
 *
 *   prefill:  layer 0 ─ layer 1 ─ layer 2 ─ … ─ layer L-1 │ done
 *   decode:        copy [0,1) ─ copy [1,3) ─ …  copy [k,L) │ ← only this tail is exposed
 *
 * One copy is in flight at a time; when it lands, every layer that became ready meanwhile
 * goes in the next copy (so a slow copy batches layers, a fast one follows layer by layer).
 * A range never reaches past the layers ready when it is issued, and every layer is copied
 * exactly once, in order. No clock or I/O here: the driver (layer-ready.ts) feeds it.
 */

/** Layers [first, end). */
export interface LayerRange {
  first: number;
  end: number;
}

export interface LayerPlanOptions {
  numLayers: number;
  /** Copy at most this many layers at once (default: all that are ready). */
  maxLayersPerCopy?: number;
}

export class LayerCopyPlanner {
  readonly numLayers: number;
  private readonly maxPerCopy: number;
  /** Layers copied or being copied: [0, issuedEnd). */
  private issuedEnd = 0;
  private copiedEnd = 0;
  private inFlight: LayerRange | undefined;

  constructor(options: LayerPlanOptions) {
    if (!Number.isSafeInteger(options.numLayers) || options.numLayers < 1) throw new RangeError(`numLayers ${options.numLayers}`);
    this.numLayers = options.numLayers;
    this.maxPerCopy = Math.max(1, options.maxLayersPerCopy ?? options.numLayers);
  }

  get done(): boolean {
    return this.copiedEnd === this.numLayers;
  }

  /** Layers whose copy has landed: [0, copiedLayers). */
  get copiedLayers(): number {
    return this.copiedEnd;
  }

  /** The next range to copy when `layersReady` layers are finished, or undefined (wait). */
  next(layersReady: number): LayerRange | undefined {
    if (this.inFlight !== undefined) return undefined;
    const ready = Math.min(Math.max(0, Math.floor(layersReady)), this.numLayers);
    if (ready <= this.issuedEnd) return undefined;
    const range = { first: this.issuedEnd, end: Math.min(ready, this.issuedEnd + this.maxPerCopy) };
    this.inFlight = range;
    this.issuedEnd = range.end;
    return range;
  }

  /** The in-flight copy landed. */
  landed(range: LayerRange): void {
    if (this.inFlight === undefined || this.inFlight.first !== range.first || this.inFlight.end !== range.end) {
      throw new Error(`layer copy [${range.first}, ${range.end}) landed but [${this.inFlight?.first}, ${this.inFlight?.end}) was in flight`);
    }
    this.inFlight = undefined;
    this.copiedEnd = range.end;
  }
}

/** One copy as the driver timed it (ms on one clock). */
export interface TimedCopy extends LayerRange {
  startMs: number;
  endMs: number;
}

export interface HiddenCopyReport {
  /** Total time copies were in flight. */
  copyMs: number;
  /** Copy time spent while the prefill was still computing (overlapped). */
  hiddenMs: number;
  /** From the last layer being ready to the last copy landing: what the copy adds to TTFT. */
  exposedMs: number;
  /** hiddenMs / copyMs (1 when nothing was copied). */
  hiddenFraction: number;
}

/**
 * How much of the copy the compute hid. Worked example: layers ready at 10, 20, 30 ms (done at
 * 30); copies [0,1) 10→14, [1,2) 20→24, [2,3) 30→34 → copyMs 12, hiddenMs 8 (the first two),
 * exposedMs 4, hiddenFraction 0.67. A whole-block pull after the prefill would expose all 12.
 */
export function hiddenCopyReport(copies: readonly TimedCopy[], computeDoneMs: number): HiddenCopyReport {
  let copyMs = 0;
  let hiddenMs = 0;
  let lastEnd = computeDoneMs;
  for (const c of copies) {
    const ms = Math.max(0, c.endMs - c.startMs);
    copyMs += ms;
    hiddenMs += Math.max(0, Math.min(c.endMs, computeDoneMs) - c.startMs);
    lastEnd = Math.max(lastEnd, c.endMs);
  }
  return { copyMs, hiddenMs, exposedMs: lastEnd - computeDoneMs, hiddenFraction: copyMs > 0 ? hiddenMs / copyMs : 1 };
}
