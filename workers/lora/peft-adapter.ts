/**
 * PEFT LoRA adapters as data: `adapter_config.json` + `adapter_model.safetensors` read into a
 * LoraAdapterSpec (rank, alpha, scaling, target modules, the tensor files and a content hash of
 * their bytes). What the engines cannot apply is refused here, with an error naming it: DoRA,
 * embedding / lm_head / other non-linear targets, modules_to_save, per-module rank or alpha
 * patterns, trained biases, and a rank above --max-lora-rank. The native engine reads the
 * factors themselves (native/src/core/lora.cc) and checks their shapes against the model.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ModelFormatError } from '../models/errors.js';
import { parseSafetensorsHeader } from '../models/safetensors.js';
import { xxh3Seeded } from '../../router/index.js';

/** The linear layers an adapter may target, PEFT module names, in the engine's order. */
export const LORA_TARGET_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTargetModule = (typeof LORA_TARGET_MODULES)[number];

export const DEFAULT_MAX_LORA_RANK = 64;

export interface LoraAdapterSpec {
  /** Absolute adapter directory. */
  dir: string;
  rank: number;
  alpha: number;
  useRslora: boolean;
  /** alpha / rank, or alpha / sqrt(rank) with rsLoRA: what the engine multiplies B·A·x by. */
  scale: number;
  targets: LoraTargetModule[];
  /** XXH3-64 of the weight files' bytes (name-sorted, concatenated), hex: the content half of the adapter identity. */
  contentHash: string;
  /** Total bytes of the weight files (what loading one reads). */
  weightBytes: number;
  /** base_model_name_or_path from the config, when set (informational). */
  baseModel?: string;
}

export class LoraAdapterError extends ModelFormatError {}

// base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_<A|B>.weight
const TENSOR_RE = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_(A|B)\.weight$/;

export async function readPeftAdapter(dirIn: string, opts: { maxLoraRank?: number } = {}): Promise<LoraAdapterSpec> {
  const dir = resolve(dirIn);
  const maxRank = opts.maxLoraRank ?? DEFAULT_MAX_LORA_RANK;
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8'));
  } catch (err) {
    throw new LoraAdapterError(`${dir}: cannot read adapter_config.json: ${(err as Error).message}`, { cause: err });
  }
  if (typeof raw !== 'object' || raw === null) throw new LoraAdapterError(`${dir}: adapter_config.json is not an object`);
  const cfg = raw as Record<string, unknown>;
  const bad = (what: string): never => {
    throw new LoraAdapterError(`${dir}: ${what}`);
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

  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.safetensors')).sort();
  if (files.length === 0) bad('no *.safetensors weight file (adapter_model.safetensors)');
  let weightBytes = 0;
  const chunks: Uint8Array[] = [];
  for (const f of files) {
    const bytes = await readFile(join(dir, f));
    weightBytes += bytes.length;
    chunks.push(bytes);
    let header;
    try {
      header = parseSafetensorsHeader(bytes, bytes.length);
    } catch (err) {
      throw new LoraAdapterError(`${dir}/${f}: ${(err as Error).message}`, { cause: err });
    }
    for (const name of header.tensors.keys()) {
      const m = TENSOR_RE.exec(name);
      if (m === null || !(LORA_TARGET_MODULES as readonly string[]).includes(m[3]!)) bad(`tensor '${name}' is not a LoRA factor of a supported linear layer (q/k/v/o, gate/up/down)`);
      if (!targets.includes(m![3] as LoraTargetModule)) bad(`tensor '${name}' targets '${m![3]}', which target_modules does not list`);
    }
  }
  const contentHash = xxh3Seeded(Buffer.concat(chunks)).toString(16).padStart(16, '0');
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
