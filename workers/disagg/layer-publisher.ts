/**
 * Prefill side of layer-wise streaming in a worker process: per-layer readiness of the
 * hand-offs a PrefillHandler watches, on one LayerProgressBoard.
 *
 *   mocker:  MockerConfig.onLayers = publisher.onLayers   (each modelled layer of a step)
 *   native:  publisher.wrap(engine, () => engine.layerProgress())  polls the live counter
 *            while a step that completes a watched prompt runs
 *   any:     the step resolved → every layer of its completed prompts is written
 *
 * Only watched sequences are published (the board keeps no entry for the others).
 */
import type { Engine, StepBatch, StepResult, StepSequence } from '../engines/engine.js';
import { LayerProgressBoard, layersReadyForPass, type LayerReadySource } from './layer-ready.js';

/** Layers the mocker splits a step into when it streams (its pool blocks divide by this). */
export const MOCKER_STREAM_LAYERS = 8;

/** The step computes the last chunk of this sequence's prompt (its KV is whole after it). */
function completesPrompt(s: StepSequence): boolean {
  return s.startPos < s.numPromptTokens && s.startPos + s.tokenIds.length >= s.numPromptTokens;
}

export class LayerPublisher {
  readonly board: LayerProgressBoard;
  /** Watched sequences, with a callback for their first written layer (until it ran). */
  private readonly watched = new Map<number, (() => void) | undefined>();

  constructor(
    readonly numLayers: number,
    private readonly pollMs = 1,
  ) {
    this.board = new LayerProgressBoard(numLayers);
  }

  /**
   * Publish this sequence's layers. `onFirstLayer` runs synchronously when its first layer is
   * written, while the step still runs (so the sequence is still in the scheduler's hands).
   */
  watch(seqId: number, onFirstLayer?: () => void): LayerReadySource {
    this.watched.set(seqId, onFirstLayer);
    return this.board.source(seqId);
  }

  unwatch(seqId: number): void {
    this.watched.delete(seqId);
    this.board.forget(seqId);
  }

  /** The mocker's per-layer hook. */
  readonly onLayers = (batch: StepBatch, layersDone: number): void => {
    for (const s of this.finals(batch)) this.done(s, layersDone);
  };

  /** The engine, publishing completion (and, given `progress`, the native per-layer counter). */
  wrap(engine: Engine, progress?: () => ArrayLike<bigint> | null): Engine {
    const publisher = this;
    const step = async (batch: StepBatch): Promise<StepResult> => {
        const finals = publisher.finals(batch);
        if (finals.length === 0) return engine.step(batch);
        let timer: NodeJS.Timeout | undefined;
        const live = progress?.();
        if (live !== undefined && live !== null && live.length >= 2) {
          // This step's forward is the next one the backend begins.
          const pass = BigInt(live[0]!) + 1n;
          const poll = (): void => {
            const n = layersReadyForPass(progress!(), pass, publisher.numLayers);
            for (const s of finals) publisher.done(s, n);
            timer = setTimeout(poll, publisher.pollMs);
          };
          timer = setTimeout(poll, publisher.pollMs);
        }
        try {
          const result = await engine.step(batch);
          for (const s of finals) publisher.done(s, publisher.numLayers);
          return result;
        } catch (err) {
          for (const s of finals) publisher.board.failed(s, err);
          throw err;
        } finally {
          clearTimeout(timer);
        }
    };
    // Only step() changes: the engine's other members (native KV movement, device info) stay
    // reachable to whoever casts it.
    return new Proxy(engine, {
      get(target, key) {
        if (key === 'step') return step;
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  private done(seqId: number, layers: number): void {
    this.board.layersDone(seqId, layers);
    const first = this.watched.get(seqId);
    if (first === undefined || layers < 1) return;
    this.watched.set(seqId, undefined);
    first();
  }

  private finals(batch: StepBatch): number[] {
    const out: number[] = [];
    for (const s of batch.sequences) if (this.watched.has(s.seqId) && completesPrompt(s)) out.push(s.seqId);
    return out;
  }
}
