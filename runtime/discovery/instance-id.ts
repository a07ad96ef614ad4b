/** Instance ids for backends without a server-assigned lease id (memory, file). */
import { randomBytes } from 'node:crypto';
import type { InstanceId } from '../../proto/wire.js';
import { formatInstanceId } from './keys.js';

/** A random non-zero u64 from the OS CSPRNG, as 16 hex digits. */
export function randomInstanceId(): InstanceId {
  for (;;) {
    const id = randomBytes(8).readBigUInt64BE(0);
    // Zero reads as "no lease" in etcd; keep the id space identical across backends.
    if (id !== 0n) return formatInstanceId(id);
  }
}
