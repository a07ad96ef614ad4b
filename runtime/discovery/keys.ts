/** etcd/file key layout of docs/design.md "Addressing and discovery". */
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

/** The parts of a model-card key `v1/models/{ns}/{model_name}/{instance_id_hex}`. */
export interface ModelKeyParts {
  namespace: string;
  /** May contain `/` (`Qwen/Qwen3-0.6B`): everything between the namespace and the last segment. */
  model: string;
  instanceId: InstanceId;
}

/**
 * Split a model-card key; undefined when it does not have that layout, when its last segment
 * is not a 16-digit lowercase hex instance id, or when `namespace` is given and differs.
 */
export function parseModelKey(key: string, namespace?: string): ModelKeyParts | undefined {
  const root = 'v1/models/';
  if (!key.startsWith(root)) return undefined;
  const rest = key.slice(root.length);
  const nsEnd = rest.indexOf('/');
  const idStart = rest.lastIndexOf('/') + 1;
  if (nsEnd <= 0 || idStart - 1 <= nsEnd + 1) return undefined;
  const ns = rest.slice(0, nsEnd);
  const model = rest.slice(nsEnd + 1, idStart - 1);
  const instanceId = rest.slice(idStart);
  if (namespace !== undefined && ns !== namespace) return undefined;
  if (!/^[0-9a-f]{16}$/.test(instanceId)) return undefined;
  return { namespace: ns, model, instanceId };
}
