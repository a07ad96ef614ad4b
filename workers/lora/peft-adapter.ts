/**
 * PEFT LoRA adapters as data: `adapter_config.json` + `*.safetensors` read into a
 * LoraAdapterSpec (rank, alpha, scaling, target modules, a content hash of the weights and
 * config). What the engines cannot apply is refused here, with an error naming it: DoRA,
 * embedding / lm_head / other non-linear targets, modules_to_save, per-module rank or alpha
 * patterns, trained biases, and a rank above --max-lora-rank.
 *
 * The files are untrusted (adapter-files.ts reads them): regular files only, sizes bounded,
 * every header checked against the rank and the model's shapes before a tensor byte is read,
 * then the weights streamed through the hash. The native engine reads the factors again
 * (native/src/core/lora.cc), with the same checks of its own.
 */
import { basename, join } from 'node:path';
import { parseSafetensorsHeader, type TensorInfo } from '../models/safetensors.js';
import { xxh3SeededStream } from '../../router/index.js';
import {
  LoraAdapterError,
  MAX_ADAPTER_CONFIG_BYTES,
  MAX_ADAPTER_HEADER_BYTES,
  MAX_ADAPTER_WEIGHT_FILES,
  adapterDirUnder,
  listFiles,
  openRegularFile,
  readExactly,
  readSmallFile,
  streamBytes,
  unreadable,
  type OpenedFile,
} from './adapter-files.js';
import { loraTargetDims, loraTensorName, type LoraModelDims } from './lora-dims.js';

export { LoraAdapterError, type LoraRefusal } from './adapter-files.js';

/** The linear layers an adapter may target, PEFT module names, in the engine's order. */
export const LORA_TARGET_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTargetModule = (typeof LORA_TARGET_MODULES)[number];

export const DEFAULT_MAX_LORA_RANK = 64;
/** `--max-lora-bytes`: weight bytes of one adapter (a 70B model's rank-64 adapter in bf16 is 1.7 GB). */
export const DEFAULT_MAX_LORA_BYTES = 2 * 1024 ** 3;

export interface LoraAdapterSpec {
  /** Absolute adapter directory (its real path when roots are set). */
  dir: string;
  rank: number;
  alpha: number;
  useRslora: boolean;
  /** alpha / rank, or alpha / sqrt(rank) with rsLoRA: what the engine multiplies B·A·x by. */
  scale: number;
  targets: LoraTargetModule[];
  /**
   * XXH3-64, hex, of the weight files' bytes (name-sorted) followed by the normalised config
   * (r, lora_alpha, use_rslora, targets): the content half of the adapter identity. The same
   * weights under another alpha, rank or target set compute other KV, so they get another id.
   */
  contentHash: string;
  /** Total bytes of the weight files (what loading one reads). */
  weightBytes: number;
  /** base_model_name_or_path from the config, when set (informational). */
  baseModel?: string;
}

export interface ReadPeftAdapterOptions {
  maxLoraRank?: number;
  /** Most bytes of weight files (`--max-lora-bytes`); default DEFAULT_MAX_LORA_BYTES. */
  maxBytes?: number;
  /**
   * The base model's dimensions: every factor's presence and shape is then checked from the
   * headers, so a file's size is known to be what the config implies before a tensor byte is read.
   */
  dims?: LoraModelDims;
  /** Directories loads may read from (`--lora-root`); empty or absent = anywhere. */
  roots?: readonly string[];
}

// base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_<A|B>.weight
const TENSOR_RE = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_(A|B)\.weight$/;
const FLOAT_DTYPES: ReadonlySet<string> = new Set(['F32', 'F16', 'BF16']);

export async function readPeftAdapter(dirIn: string, opts: ReadPeftAdapterOptions = {}): Promise<LoraAdapterSpec> {
  const roots = opts.roots ?? [];
  const dir = await adapterDirUnder(dirIn, roots);
  const maxRank = opts.maxLoraRank ?? DEFAULT_MAX_LORA_RANK;
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_LORA_BYTES;
  const text = await readSmallFile(join(dir, 'adapter_config.json'), MAX_ADAPTER_CONFIG_BYTES, `adapter_config.json is over ${MAX_ADAPTER_CONFIG_BYTES} bytes`, roots);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    // V8's message quotes the input: never sent to a client.
    throw new LoraAdapterError('invalid_config', 'adapter_config.json is not valid JSON', `${dir}/adapter_config.json: ${(err as Error).message}`, { cause: err });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new LoraAdapterError('invalid_config', 'adapter_config.json is not an object', `${dir}: adapter_config.json is not an object`);
  const cfg = raw as Record<string, unknown>;
  const bad = (what: string): never => {
    throw new LoraAdapterError('unsupported', what, `${dir}: ${what}`);
  };
  if (cfg['peft_type'] !== undefined && cfg['peft_type'] !== 'LORA') bad(`peft_type '${String(cfg['peft_type'])}' is not supported (only LORA)`);
  if (cfg['use_dora'] === true) bad('DoRA (use_dora: true) is not supported');
  const rank = cfg['r'];
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank <= 0) bad(`r must be a positive integer, got ${JSON.stringify(rank)}`);
  const r = rank as number;
  if (r > maxRank) bad(`rank ${r} exceeds --max-lora-rank ${maxRank}`);
  const alphaRaw = cfg['lora_alpha'] ?? r;
  if (typeof alphaRaw !== 'number' || !Number.isFinite(alphaRaw)) bad(`lora_alpha must be a number, got ${JSON.stringify(alphaRaw)}`);
  const alpha = alphaRaw as number;
  const useRslora = cfg['use_rslora'] === true;
  for (const key of ['rank_pattern', 'alpha_pattern'] as const) {
    const v = cfg[key];
    if (v !== undefined && v !== null && (typeof v !== 'object' || Object.keys(v).length > 0)) bad(`${key} (per-module ranks or alphas) is not supported`);
  }
  const mts = cfg['modules_to_save'];
  if (Array.isArray(mts) && mts.length > 0) bad(`modules_to_save ${JSON.stringify(mts)} is not supported`);
  if (cfg['bias'] !== undefined && cfg['bias'] !== 'none') bad(`bias '${String(cfg['bias'])}' is not supported (only 'none')`);
  const targets = parseTargets(cfg['target_modules'], bad);

  const files = await listFiles(dir, '.safetensors');
  if (files.length === 0) throw unreadable(`${dir}: no *.safetensors weight file`);
  if (files.length > MAX_ADAPTER_WEIGHT_FILES) throw new LoraAdapterError('too_large', `the adapter has more than ${MAX_ADAPTER_WEIGHT_FILES} weight files`, `${dir}: ${files.length} weight files`);
  const opened: Array<{ file: OpenedFile; dataStart: number }> = [];
  try {
    // Headers first, every file: sizes and shapes are settled before any tensor byte is read.
    const factors = new Map<string, TensorInfo>();
    let weightBytes = 0;
    for (const name of files) {
      const file = await openRegularFile(join(dir, name), maxBytes - weightBytes, `the adapter's weight files are over ${maxBytes} bytes (--max-lora-bytes)`, roots);
      opened.push({ file, dataStart: 0 });
      weightBytes += file.size;
      const header = await readHeader(file, dir);
      opened[opened.length - 1]!.dataStart = header.dataStart;
      for (const [tensor, info] of header.tensors) {
        if (factors.has(tensor)) throw invalidWeights(`tensor '${tensor}' appears in two weight files`, dir);
        factors.set(tensor, info);
      }
    }
    checkFactors(factors, r, targets, opts.dims, dir);
    // Then the bytes, streamed through the hash: what the headers promised, and no more.
    const hasher = xxh3SeededStream();
    for (const { file } of opened) await streamBytes(file, 0, file.size, (chunk) => hasher.update(chunk));
    hasher.update(JSON.stringify({ r, lora_alpha: alpha, use_rslora: useRslora, target_modules: targets }));
    const contentHash = hasher.digest().toString(16).padStart(16, '0');
    const baseModel = typeof cfg['base_model_name_or_path'] === 'string' ? cfg['base_model_name_or_path'] : undefined;
    return {
      dir,
      rank: r,
      alpha,
      useRslora,
      scale: useRslora ? alpha / Math.sqrt(r) : alpha / r,
      targets,
      contentHash,
      weightBytes,
      ...(baseModel === undefined ? {} : { baseModel }),
    };
  } finally {
    await Promise.all(opened.map(({ file }) => file.handle.close().catch(() => undefined)));
  }
}

function invalidWeights(what: string, dir: string, cause?: unknown): LoraAdapterError {
  return new LoraAdapterError('invalid_weights', what, `${dir}: ${what}`, cause === undefined ? undefined : { cause });
}

/** The safetensors header of an opened file, bounded and checked against the file's size. */
async function readHeader(file: OpenedFile, dir: string): Promise<{ tensors: Map<string, TensorInfo>; dataStart: number }> {
  const label = basename(file.path);
  if (file.size < 8) throw invalidWeights(`${label}: invalid safetensors file (shorter than its header length)`, dir);
  const headerLen = Number((await readExactly(file, 0, 8)).readBigUInt64LE(0));
  if (headerLen > MAX_ADAPTER_HEADER_BYTES) throw invalidWeights(`${label}: invalid safetensors file (header length ${headerLen} over ${MAX_ADAPTER_HEADER_BYTES})`, dir);
  if (8 + headerLen > file.size) throw invalidWeights(`${label}: invalid safetensors file (header length past end of file)`, dir);
  const bytes = await readExactly(file, 0, 8 + headerLen);
  try {
    // Checks that the tensors tile the data section and that it ends where the file does.
    return parseSafetensorsHeader(bytes, file.size);
  } catch (err) {
    throw invalidWeights(`${label}: invalid safetensors file (${(err as Error).message.replace(/^safetensors: /, '')})`, dir, err);
  }
}

/**
 * Every tensor is a LoRA factor of a listed target, in a float dtype, A [r, in] and B [out, r]
 * in pairs; with the model's dimensions, in and out are the layer's and every (layer, target)
 * of the model is present (what the native engine will require).
 */
function checkFactors(factors: ReadonlyMap<string, TensorInfo>, r: number, targets: readonly LoraTargetModule[], dims: LoraModelDims | undefined, dir: string): void {
  const bad = (what: string): never => {
    throw invalidWeights(what, dir);
  };
  for (const [name, info] of factors) {
    const m = TENSOR_RE.exec(name);
    if (m === null || !(LORA_TARGET_MODULES as readonly string[]).includes(m[3]!)) return bad(`tensor '${name}' is not a LoRA factor of a supported linear layer (q/k/v/o, gate/up/down)`);
    const target = m[3] as LoraTargetModule;
    if (!targets.includes(target)) return bad(`tensor '${name}' targets '${target}', which target_modules does not list`);
    if (!FLOAT_DTYPES.has(info.dtype)) return bad(`tensor '${name}' is ${info.dtype}; factors are F32, F16 or BF16`);
    const layer = Number(m[1]);
    const isA = m[4] === 'A';
    const want = dims !== undefined ? loraTargetDims(dims, target) : undefined;
    if (dims !== undefined && layer >= dims.numLayers) return bad(`tensor '${name}' names layer ${layer}; the model has ${dims.numLayers}`);
    const shape = isA ? [r, want?.inF ?? info.shape[1]] : [want?.outF ?? info.shape[0], r];
    if (info.shape.length !== 2 || info.shape[0] !== shape[0] || info.shape[1] !== shape[1]) return bad(`tensor '${name}' has shape ${JSON.stringify(info.shape)}; expected ${JSON.stringify(shape)} (from r = ${r}${dims !== undefined ? ' and the base model' : ''})`);
    const partner = name.replace(isA ? /lora_A\.weight$/ : /lora_B\.weight$/, isA ? 'lora_B.weight' : 'lora_A.weight');
    if (!factors.has(partner)) return bad(`tensor '${partner}' is missing (each factor comes in an A and B pair)`);
  }
  if (dims === undefined) return;
  for (let l = 0; l < dims.numLayers; l++) {
    for (const t of targets) {
      const a = loraTensorName(l, t, 'A');
      if (!factors.has(a)) return bad(`tensor '${a}' is missing`);
    }
  }
}

function parseTargets(v: unknown, bad: (what: string) => never): LoraTargetModule[] {
  if (v === 'all-linear') return [...LORA_TARGET_MODULES];
  if (typeof v === 'string') return bad(`target_modules as a pattern ('${v}') is not supported; list the modules`);
  if (!Array.isArray(v) || v.length === 0) return bad('target_modules must list the targeted modules');
  const out = new Set<LoraTargetModule>();
  for (const m of v) {
    if (typeof m !== 'string') return bad(`target_modules entry ${JSON.stringify(m)} is not a string`);
    // PEFT matches by suffix: "self_attn.q_proj" and "q_proj" name the same layers.
    const leaf = m.split('.').pop()!;
    if (leaf === 'embed_tokens' || leaf === 'lm_head') return bad(`target module '${m}' (embedding / lm_head) is not supported`);
    if (!(LORA_TARGET_MODULES as readonly string[]).includes(leaf)) return bad(`target module '${m}' is not supported (q/k/v/o_proj, gate/up/down_proj)`);
    out.add(leaf as LoraTargetModule);
  }
  return LORA_TARGET_MODULES.filter((t) => out.has(t));
}
