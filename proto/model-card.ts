/**
 * The model card: what a worker announces in discovery under
 * `v1/models/{ns}/{model_name}/{instance_id_hex}` (JSON), and the one validator every reader
 * uses. Cards come from other processes, so a reader parses them once at the edge
 * (runtime/discovery/model-card-feed.ts) and never trusts a field it did not check.
 */
import type { EngineKind, InstanceId, WorkerRole } from './wire.js';
import { embeddingCapabilityError, WORKER_TASKS, type EmbeddingCapability, type WorkerTask } from './embedding.js';

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
  /** The pool's layout name, as hand-offs carry it (`KvTransferParams.layout`). */
  kvLayoutName?: string;
  /**
   * The pool's layout as data (workers/kv-transfer/layout-descriptor.ts); absent on older
   * workers and on the mocker, whose layout is read from `kvLayoutName`. Checked by its reader.
   */
  kvLayout?: KvLayoutDescriptor;
  /** KV transports this worker can serve to peers (workers/kv-transfer/transport-choice.ts). */
  kvTransports?: KvTransport[];
  /** Where this worker's KV pool lives; a peer picks the transport from both placements. */
  kvPlacement?: KvPlacement;
  /**
   * Layer-wise streaming (--kv-layer-streaming): a prefill worker announces hand-offs early
   * with a layer-progress slot; a decode worker serves `kv_prefetch` (proto/kv-prefetch.ts).
   */
  kvLayerStreaming?: boolean;
  eosTokenIds: number[];
  /** Multi-LoRA: adapters resident on this worker, by name, with their lora_id (router/hashing.ts loraIdOf). */
  loras?: Array<{ name: string; loraId: number; path?: string }>;
  /**
   * Multi-LoRA: false on a worker whose engine refuses adapters (the CUDA backend has no LoRA
   * kernels yet), which then never receives an adapter request or load. Absent (cards of older
   * workers) = supports them, as CPU and mocker workers always have.
   */
  supportsLora?: boolean;
  /** What the worker serves; absent = 'generate'. An 'embed' card's `endpoint` is `embed` (proto/embedding.ts). */
  task?: WorkerTask;
  /** Present exactly when task is 'embed'. */
  embedding?: EmbeddingCapability;
  /** The model's class from config.json (e.g. Qwen3MoeForCausalLM); absent on older workers. */
  architecture?: string;
  /**
   * Parameters of the model (memory: what a worker must hold) and those one token reads (a
   * mixture of experts' router, top-k and shared experts; step time). Equal for dense models.
   */
  parameters?: ModelParameters;
  /**
   * The worker's own name (`runtime worker --worker-name`; `runtime up` names its workers agg-0,
   * decode-1, embed-0, …): the dashboard shows it beside the instance id. Absent when unnamed.
   */
  workerName?: string;
}

export interface ModelParameters {
  total: number;
  active: number;
  /** A mixture of experts: routed experts per MoE layer and top-k (a decode batch's reads; absent on dense models and older workers). */
  experts?: { count: number; topK: number };
}

/** What `--worker-name` and a card's `workerName` may be: short, printable, no markup. */
export const WORKER_NAME = /^[A-Za-z0-9][\w.-]{0,63}$/;

/** True for a card whose worker can run adapter requests (`supportsLora` absent or true). */
export function servesLora(card: Pick<ModelCard, 'supportsLora'> | undefined): boolean {
  return card !== undefined && card.supportsLora !== false;
}

/** True for a card that serves generation (every card without `task`). */
export function servesGeneration(card: Pick<ModelCard, 'task'>): boolean {
  return card.task === undefined || card.task === 'generate';
}

/** A block_major.v1 KV pool's shape: what a peer needs to copy or convert its blocks. */
export interface KvLayoutDescriptor {
  order: 'block_major.v1';
  /** Tokens per block. */
  blockSize: number;
  /** Element type: fp8_e4m3 holds K / k_scale and V / v_scale with the model's per-layer scales (docs/real-model.md). */
  dtype: 'f32' | 'bf16' | 'fp8_e4m3';
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  /** Tensor-parallel degree of the pool; only 1 exists today. */
  tp: 1;
}

/**
 * How KV moves between two workers' pools: `ucx-host` (host pools, UCX read), `cuda-ipc`
 * (device pools on one node), `ucx-cuda` (device pools, UCX reads GPU memory), `staged`
 * (device pools through pinned host bounce buffers).
 */
export type KvTransport = 'ucx-host' | 'cuda-ipc' | 'ucx-cuda' | 'staged';
export const KV_TRANSPORTS: readonly KvTransport[] = ['ucx-host', 'cuda-ipc', 'ucx-cuda', 'staged'];

/** Where a KV pool lives, as far as choosing a transport goes. Absent = a host pool (older workers). */
export interface KvPlacement {
  pool: 'host' | 'device';
  /** The device API of a device pool ('cuda'). */
  deviceKind?: string;
  hostname: string;
  /** /proc/sys/kernel/random/boot_id: tells two nodes with one hostname apart. */
  bootId?: string;
  /** The GPU a device pool is on (ordinal or UUID). */
  gpuId?: string;
  /** The worker's UCX build can register CUDA memory (UcxTransferAgent.cudaSupported). */
  ucxCuda: boolean;
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
  if (v.kvLayoutName !== undefined && typeof v.kvLayoutName !== 'string') return fail('kvLayoutName must be a string');
  if (v.kvLayout !== undefined && (typeof v.kvLayout !== 'object' || v.kvLayout === null || Array.isArray(v.kvLayout))) return fail('kvLayout must be an object');
  // Unknown transport names are dropped by readers, not refused: a newer worker may serve more.
  if (v.kvTransports !== undefined && (!Array.isArray(v.kvTransports) || !v.kvTransports.every((t) => typeof t === 'string'))) return fail('kvTransports must be an array of strings');
  if (v.kvPlacement !== undefined && (typeof v.kvPlacement !== 'object' || v.kvPlacement === null || Array.isArray(v.kvPlacement))) return fail('kvPlacement must be an object');
  if (v.kvLayerStreaming !== undefined && typeof v.kvLayerStreaming !== 'boolean') return fail('kvLayerStreaming must be a boolean');
  if (v.supportsLora !== undefined && typeof v.supportsLora !== 'boolean') return fail('supportsLora must be a boolean');
  if (v.task !== undefined && !WORKER_TASKS.includes(v.task as WorkerTask)) return fail(`task must be one of ${WORKER_TASKS.join(', ')}`);
  if ((v.task === 'embed') !== (v.embedding !== undefined)) return fail("embedding must be present exactly when task is 'embed'");
  if (v.embedding !== undefined) {
    const reason = embeddingCapabilityError(v.embedding);
    if (reason !== undefined) return fail(reason);
  }
  if (v.architecture !== undefined && typeof v.architecture !== 'string') return fail('architecture must be a string');
  if (v.parameters !== undefined) {
    const p = v.parameters as Record<string, unknown> | null;
    const ok = typeof p === 'object' && p !== null && isInt(p.total) && isInt(p.active) && (p.active as number) >= 0 && (p.active as number) <= (p.total as number);
    if (!ok) return fail('parameters must be {total, active} integers with 0 <= active <= total');
    const e = p.experts as Record<string, unknown> | undefined | null;
    if (e !== undefined && (typeof e !== 'object' || e === null || !isInt(e.count) || !isInt(e.topK) || (e.topK as number) < 1 || (e.topK as number) > (e.count as number))) {
      return fail('parameters.experts must be {count, topK} integers with 1 <= topK <= count');
    }
  }
  if (v.workerName !== undefined && (typeof v.workerName !== 'string' || !WORKER_NAME.test(v.workerName))) return fail('workerName must be 1-64 letters, digits, ".", "_" or "-"');
  // Every field of ModelCard was checked above; the cast only forgets the index signature.
  return { ok: true, card: value as ModelCard };
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

function fail(reason: string): ModelCardParse {
  return { ok: false, reason };
}
