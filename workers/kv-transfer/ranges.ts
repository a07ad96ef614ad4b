/**
 * Turns a block-id mapping into the byte ranges one batched read moves. Pure: no I/O.
 *
 * Remote block r[i] lands in local block l[i]. Runs where both r and l step by +1 become one
 * range, so a prompt whose blocks sit side by side on both pools moves in a single get.
 * The result is a Float64Array of [remoteOffset, localOffset, length] triples, the layout
 * the addon's read() takes (offsets stay exact up to 2^53 bytes).
 */
import { TandemError } from '../../runtime/errors.js';

export const RANGE_STRIDE = 3;

function checkBlockId(id: number, side: string): void {
  if (!Number.isSafeInteger(id) || id < 0) {
    throw new TandemError('invalid_argument', `${side} block id ${id} is not a non-negative integer`);
  }
}

/**
 * Coalesced [remoteOffset, localOffset, length] triples for copying remote blocks into local
 * ones. Two passes (count, then fill) so nothing is allocated per block.
 */
export function blockRanges(
  remoteBlockIds: ArrayLike<number>,
  localBlockIds: ArrayLike<number>,
  blockBytes: number,
): Float64Array {
  if (remoteBlockIds.length !== localBlockIds.length) {
    throw new TandemError(
      'invalid_argument',
      `block id lists differ in length: ${remoteBlockIds.length} remote, ${localBlockIds.length} local`,
    );
  }
  if (!Number.isSafeInteger(blockBytes) || blockBytes <= 0) {
    throw new TandemError('invalid_argument', `block size ${blockBytes} bytes is not a positive integer`);
  }
  const n = remoteBlockIds.length;
  let runs = 0;
  for (let i = 0; i < n; i++) {
    checkBlockId(remoteBlockIds[i]!, 'remote');
    checkBlockId(localBlockIds[i]!, 'local');
    if (i === 0 || !continuesRun(remoteBlockIds, localBlockIds, i)) runs++;
  }
  const out = new Float64Array(runs * RANGE_STRIDE);
  let k = -RANGE_STRIDE;
  for (let i = 0; i < n; i++) {
    if (i === 0 || !continuesRun(remoteBlockIds, localBlockIds, i)) {
      k += RANGE_STRIDE;
      out[k] = remoteBlockIds[i]! * blockBytes;
      out[k + 1] = localBlockIds[i]! * blockBytes;
      out[k + 2] = blockBytes;
    } else {
      out[k + 2]! += blockBytes;
    }
  }
  return out;
}

function continuesRun(remote: ArrayLike<number>, local: ArrayLike<number>, i: number): boolean {
  return remote[i] === remote[i - 1]! + 1 && local[i] === local[i - 1]! + 1;
}

/** Bytes a range list moves. */
export function rangeBytes(ranges: Float64Array): number {
  let total = 0;
  for (let i = 2; i < ranges.length; i += RANGE_STRIDE) total += ranges[i]!;
  return total;
}

/** Number of gets a range list issues. */
export function rangeCount(ranges: Float64Array): number {
  return ranges.length / RANGE_STRIDE;
}

/**
 * The same byte slice [sliceOffset, sliceOffset + sliceBytes) of every block: one triple per
 * block, e.g. layers [a, b) of block_major blocks (offset a × layerBytes). A slice that is the
 * whole block coalesces like blockRanges.
 */
export function blockSliceRanges(
  remoteBlockIds: ArrayLike<number>,
  localBlockIds: ArrayLike<number>,
  blockBytes: number,
  sliceOffset: number,
  sliceBytes: number,
): Float64Array {
  if (!Number.isSafeInteger(sliceOffset) || !Number.isSafeInteger(sliceBytes) || sliceOffset < 0 || sliceBytes <= 0 || sliceOffset + sliceBytes > blockBytes) {
    throw new TandemError('invalid_argument', `slice [${sliceOffset}, ${sliceOffset + sliceBytes}) is not inside a block of ${blockBytes} bytes`);
  }
  if (sliceOffset === 0 && sliceBytes === blockBytes) return blockRanges(remoteBlockIds, localBlockIds, blockBytes);
  blockRanges(remoteBlockIds, localBlockIds, blockBytes); // the same checks of ids and lengths
  const n = remoteBlockIds.length;
  const out = new Float64Array(n * RANGE_STRIDE);
  for (let i = 0; i < n; i++) {
    out[i * RANGE_STRIDE] = remoteBlockIds[i]! * blockBytes + sliceOffset;
    out[i * RANGE_STRIDE + 1] = localBlockIds[i]! * blockBytes + sliceOffset;
    out[i * RANGE_STRIDE + 2] = sliceBytes;
  }
  return out;
}
