/**
 * A real host KV pool for the mocker. The mocker computes nothing, but in disaggregated mode
 * its pool must hold bytes that a transfer really moves, and that a test can check. So every
 * token the mocker "computes" gets a stamp in its KV slot that depends only on (token id,
 * position), exactly as much as real KV depends on the prefix for our purposes: the same prompt
 * prefix gives the same bytes on every worker, and a block copied to the wrong place, or not
 * copied at all, fails verification.
 *
 *   pool[block][slot] : kvBytesPerToken bytes; the first min(16, kvBytesPerToken) are the stamp
 *   stamp = u32 tokenId ‖ u32 position ‖ u32 mix(tokenId, position) ‖ u32 STAMP_MAGIC
 */
import type { Engine, EngineDrafter, EngineInfo, StepBatch, StepResult } from '../engines/engine.js';

export const STAMP_MAGIC = 0x4b565354; // 'KVST'
const STAMP_WORDS = 4;

/** Layout name of a stamped mocker pool; peers must agree on every part of it. */
export function stampedLayoutName(blockSize: number, kvBytesPerToken: number): string {
  return `mocker-stamped.v1;block=${blockSize};bytes_per_token=${kvBytesPerToken}`;
}

function mix(tokenId: number, position: number): number {
  let h = Math.imul(tokenId ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(position + 0x632be5ab, 0xc2b2ae35);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return (h ^ (h >>> 12)) >>> 0;
}

/** Stamps and checks token slots in a block-major host pool. */
export class StampedKvPool {
  readonly blockBytes: number;
  private readonly view: DataView;
  private readonly stampBytes: number;

  constructor(
    buffer: ArrayBuffer,
    readonly blockSize: number,
    readonly kvBytesPerToken: number,
  ) {
    this.blockBytes = blockSize * kvBytesPerToken;
    this.view = new DataView(buffer);
    // Whole 4-byte words only, so a tiny kvBytesPerToken still stamps what fits.
    this.stampBytes = Math.min(STAMP_WORDS * 4, kvBytesPerToken - (kvBytesPerToken % 4));
  }

  /** Writes the stamps of tokens[0..n) at positions startPos.. through the block table. */
  write(blockTable: ArrayLike<number>, tokens: ArrayLike<number>, startPos: number): void {
    for (let i = 0; i < tokens.length; i++) this.writeOne(blockTable, tokens[i]!, startPos + i);
  }

  /**
   * First position in [from, to) whose slot does not hold the stamp of tokens[position], or
   * -1 when all match. `tokens` is indexed by absolute position; blockTable[0] holds block
   * index `firstBlock` of the sequence (a partial table, as an import fills).
   */
  firstMismatch(blockTable: ArrayLike<number>, tokens: ArrayLike<number>, from: number, to: number, firstBlock = 0): number {
    const words = this.stampBytes / 4;
    for (let p = from; p < to; p++) {
      const base = this.slotOffset(blockTable, p, firstBlock);
      if (base < 0) return p;
      const t = tokens[p]! >>> 0;
      const expected = [t, p >>> 0, mix(t, p), STAMP_MAGIC];
      for (let w = 0; w < words; w++) if (this.view.getUint32(base + w * 4, true) !== expected[w]) return p;
    }
    return -1;
  }

  private writeOne(blockTable: ArrayLike<number>, tokenId: number, position: number): void {
    const base = this.slotOffset(blockTable, position);
    if (base < 0) return;
    const words = [tokenId >>> 0, position >>> 0, mix(tokenId >>> 0, position), STAMP_MAGIC];
    for (let w = 0; w < this.stampBytes / 4; w++) this.view.setUint32(base + w * 4, words[w]!, true);
  }

  private slotOffset(blockTable: ArrayLike<number>, position: number, firstBlock = 0): number {
    const b = Math.floor(position / this.blockSize) - firstBlock;
    if (b < 0 || b >= blockTable.length) return -1;
    const offset = blockTable[b]! * this.blockBytes + (position % this.blockSize) * this.kvBytesPerToken;
    return offset + this.stampBytes <= this.view.byteLength ? offset : -1;
  }
}

/**
 * Wraps the mocker so each step stamps the KV slots of the tokens it computes, before the
 * mocker's simulated time runs (so the bytes are in place when the step's tokens come back).
 */
export class StampingEngine implements Engine {
  readonly info: EngineInfo;

  constructor(
    private readonly inner: Engine,
    readonly pool: StampedKvPool,
  ) {
    this.info = { ...inner.info, kvBytesPerToken: pool.kvBytesPerToken };
  }

  step(batch: StepBatch): Promise<StepResult> {
    for (const s of batch.sequences) this.pool.write(s.blockTable, s.tokenIds, s.startPos);
    return this.inner.step(batch);
  }

  /** Speculative decoding: the inner engine's drafter (a verify step's drafts are stamped like any token). */
  get drafter(): EngineDrafter | undefined {
    return this.inner.drafter;
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
