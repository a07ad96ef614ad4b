/**
 * The model card: what a worker announces in discovery under
 * `v1/models/{ns}/{model_name}/{instance_id_hex}` (JSON), and the one validator every reader
 * uses. Cards come from other processes, so a reader parses them once at the edge
 * (runtime/discovery/model-card-feed.ts) and never trusts a field it did not check.
 */
import type { EngineKind, InstanceId, WorkerRole } from './wire.js';

/** Discovery value under `v1/models/{ns}/{model_name}/{instance_id_hex}`. */
export interface ModelCard {
  name: string;
  /** Absolute path of the model directory (tokenizer.json, tokenizer_config.json live there). */
  modelPath: string;
  /** Where the tokenizer and chat template are read from; normally equal to modelPath. */
  tokenizerSource: string;
  chatTemplateSource: string;
  contextLength: number;
  kvBlockSize: number;
  totalKvBlocks: number;
  maxNumBatchedTokens: number;
  role: WorkerRole;
  engine: EngineKind;
  /** Component and endpoint that serve `generate` for this card. */
  component: string;
  endpoint: string;
  instanceId: InstanceId;
  /** Hex-encoded UCX worker address for KV transfer; absent when the worker has no agent. */
  ucxWorkerAddress?: string;
  /** Bytes of KV per token (all layers), used to size transfers. */
  kvBytesPerToken?: number;
  eosTokenIds: number[];
  /** Multi-LoRA: adapters resident on this worker, by name, with their lora_id (router/hashing.ts loraIdOf). */
  loras?: Array<{ name: string; loraId: number; path?: string }>;
}

export const WORKER_ROLES: readonly WorkerRole[] = ['agg', 'prefill', 'decode'];
export const ENGINE_KINDS: readonly EngineKind[] = ['mocker', 'native'];

/** A card that passed every check, or the first check it failed (for one log line). */
export type ModelCardParse = { ok: true; card: ModelCard } | { ok: false; reason: string };

const INSTANCE_ID = /^[0-9a-f]{16}$/;

/**
 * Validate a discovery value as a ModelCard. Every required field is checked for type and
 * range; unknown extra fields are kept (a newer worker may add optional ones).
 */
export function parseModelCard(value: unknown): ModelCardParse {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return fail('not an object');
  const v = value as Record<string, unknown>;
  for (const field of ['name', 'modelPath', 'tokenizerSource', 'chatTemplateSource', 'component', 'endpoint'] as const) {
    if (typeof v[field] !== 'string' || (v[field] as string).length === 0) return fail(`${field} must be a non-empty string`);
  }
  for (const field of ['contextLength', 'kvBlockSize', 'maxNumBatchedTokens'] as const) {
    if (!isInt(v[field]) || (v[field] as number) < 1) return fail(`${field} must be a positive integer`);
  }
  if (!isInt(v.totalKvBlocks) || (v.totalKvBlocks as number) < 0) return fail('totalKvBlocks must be a non-negative integer');
  if (!WORKER_ROLES.includes(v.role as WorkerRole)) return fail(`role must be one of ${WORKER_ROLES.join(', ')}`);
  if (!ENGINE_KINDS.includes(v.engine as EngineKind)) return fail(`engine must be one of ${ENGINE_KINDS.join(', ')}`);
  if (typeof v.instanceId !== 'string' || !INSTANCE_ID.test(v.instanceId)) return fail('instanceId must be 16 lowercase hex digits');
  if (!Array.isArray(v.eosTokenIds) || !v.eosTokenIds.every((t) => isInt(t) && t >= 0)) return fail('eosTokenIds must be an array of token ids');
  if (v.ucxWorkerAddress !== undefined && typeof v.ucxWorkerAddress !== 'string') return fail('ucxWorkerAddress must be a string');
  if (v.kvBytesPerToken !== undefined && (typeof v.kvBytesPerToken !== 'number' || !(v.kvBytesPerToken >= 0))) return fail('kvBytesPerToken must be a non-negative number');
  // Every field of ModelCard was checked above; the cast only forgets the index signature.
  return { ok: true, card: value as ModelCard };
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

function fail(reason: string): ModelCardParse {
  return { ok: false, reason };
}
