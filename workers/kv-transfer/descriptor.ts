/**
 * The transfer descriptor: the part of KvTransferParams (proto/wire.ts) that says where the
 * prompt's KV lives on the prefill worker. The prefill side builds it from its registered
 * pool; the decode side checks it before pulling.
 */
import { TandemError } from '../../runtime/errors.js';
import type { KvTransferParams } from '../../proto/wire.js';

export type KvTransferDescriptor = Pick<
  KvTransferParams,
  'ucxWorkerAddress' | 'remoteKey' | 'poolBaseAddress' | 'blockBytes' | 'blockIds' | 'layout'
>;

const HEX = /^[0-9a-f]+$/i;
const ADDRESS = /^(0x[0-9a-f]+|[0-9]+)$/i;

/** Throws TandemError('invalid_argument') when the descriptor cannot be read as sent. */
export function checkDescriptor(d: KvTransferDescriptor): void {
  const bad = (why: string): never => {
    throw new TandemError('invalid_argument', `bad KV transfer descriptor: ${why}`);
  };
  if (typeof d.ucxWorkerAddress !== 'string' || d.ucxWorkerAddress.length % 2 !== 0 || !HEX.test(d.ucxWorkerAddress)) {
    bad('ucxWorkerAddress is not a hex string');
  }
  if (typeof d.remoteKey !== 'string' || d.remoteKey.length % 2 !== 0 || !HEX.test(d.remoteKey)) {
    bad('remoteKey is not a hex string');
  }
  if (typeof d.poolBaseAddress !== 'string' || !ADDRESS.test(d.poolBaseAddress)) {
    bad('poolBaseAddress is not an address');
  }
  if (!Number.isSafeInteger(d.blockBytes) || d.blockBytes <= 0) bad(`blockBytes ${d.blockBytes}`);
  if (!Array.isArray(d.blockIds)) bad('blockIds is not an array');
  if (typeof d.layout !== 'string' || d.layout.length === 0) bad('layout is empty');
}
