/** etcd/file key layout of DESIGN.md "Addressing and discovery". */
import type { InstanceId } from '../../proto/wire.js';

export const DEFAULT_NAMESPACE = 'tandem';

export function instanceKey(ns: string, component: string, endpoint: string, id: InstanceId): string {
  return `v1/instances/${ns}/${component}/${endpoint}/${id}`;
}

export function instancePrefix(ns: string, component: string, endpoint?: string): string {
  return endpoint === undefined ? `v1/instances/${ns}/${component}/` : `v1/instances/${ns}/${component}/${endpoint}/`;
}

export function modelKey(ns: string, modelName: string, id: InstanceId): string {
  return `v1/models/${ns}/${modelName}/${id}`;
}

export function modelPrefix(ns: string): string {
  return `v1/models/${ns}/`;
}

/** u64 → 16-digit lowercase hex. */
export function formatInstanceId(id: bigint): InstanceId {
  return BigInt.asUintN(64, id).toString(16).padStart(16, '0');
}

export function parseInstanceId(text: string): InstanceId | undefined {
  const t = text.trim().toLowerCase().replace(/^0x/, '');
  if (/^[0-9a-f]{1,16}$/.test(t)) return t.padStart(16, '0');
  return undefined;
}
