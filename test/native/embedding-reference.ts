/**
 * An independent reference for the native pooling step: a plain TypeScript forward pass of a
 * Qwen2/Qwen3 model (f32 safetensors, default RoPE) written from transformers' modeling code,
 * f64 arithmetic, one sequence at a time, then sentence-transformers' Pooling (mean / last
 * token over the final-norm hidden states) and Normalize. Slow and simple on purpose.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SafetensorsFile } from '../../workers/models/index.js';

interface Cfg {
  hidden: number;
  inter: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  eps: number;
  theta: number;
  qkNorm: boolean;
  bias: boolean;
}

export class ReferenceEmbedder {
  private constructor(
    private readonly cfg: Cfg,
    private readonly w: Map<string, Float64Array>,
  ) {}

  static async load(dir: string): Promise<ReferenceEmbedder> {
    const c = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Record<string, number | string | null | boolean>;
    if (c.torch_dtype !== 'float32') throw new Error('reference: f32 models only');
    if (c.rope_scaling !== null && c.rope_scaling !== undefined) throw new Error('reference: default RoPE only');
    const file = await SafetensorsFile.read(join(dir, 'model.safetensors'));
    const w = new Map<string, Float64Array>();
    for (const name of file.names) w.set(name, Float64Array.from(file.float32(name)));
    const cfg: Cfg = {
      hidden: c.hidden_size as number,
      inter: c.intermediate_size as number,
      layers: c.num_hidden_layers as number,
      heads: c.num_attention_heads as number,
      kvHeads: c.num_key_value_heads as number,
      headDim: (c.head_dim as number | undefined) ?? (c.hidden_size as number) / (c.num_attention_heads as number),
      eps: c.rms_norm_eps as number,
      theta: c.rope_theta as number,
      qkNorm: c.model_type === 'qwen3',
      bias: c.model_type === 'qwen2',
    };
    return new ReferenceEmbedder(cfg, w);
  }

  private t(name: string): Float64Array {
    const v = this.w.get(name);
    if (!v) throw new Error(`reference: no tensor ${name}`);
    return v;
  }

  /** Final-norm hidden states, [tokens][hidden]. */
  hidden(tokens: readonly number[]): Float64Array[] {
    const { hidden: H, inter: I, heads: NH, kvHeads: NKV, headDim: D, eps } = this.cfg;
    const n = tokens.length;
    const emb = this.t('model.embed_tokens.weight');
    const h = tokens.map((id) => emb.slice(id * H, (id + 1) * H));
    const invFreq = Array.from({ length: D / 2 }, (_, i) => 1 / Math.pow(this.cfg.theta, (2 * i) / D));
    for (let l = 0; l < this.cfg.layers; l++) {
      const p = `model.layers.${l}.`;
      const x = h.map((r) => rmsnorm(r, this.t(`${p}input_layernorm.weight`), eps));
      const q = x.map((r) => linear(r, this.t(`${p}self_attn.q_proj.weight`), NH * D, this.cfg.bias ? this.t(`${p}self_attn.q_proj.bias`) : undefined));
      const k = x.map((r) => linear(r, this.t(`${p}self_attn.k_proj.weight`), NKV * D, this.cfg.bias ? this.t(`${p}self_attn.k_proj.bias`) : undefined));
      const v = x.map((r) => linear(r, this.t(`${p}self_attn.v_proj.weight`), NKV * D, this.cfg.bias ? this.t(`${p}self_attn.v_proj.bias`) : undefined));
      for (let pos = 0; pos < n; pos++) {
        for (const [vec, nh, normName] of [[q[pos]!, NH, 'q_norm'], [k[pos]!, NKV, 'k_norm']] as const) {
          for (let hh = 0; hh < nh; hh++) {
            let head = vec.subarray(hh * D, (hh + 1) * D);
            if (this.cfg.qkNorm) head.set(rmsnorm(head, this.t(`${p}self_attn.${normName}.weight`), eps));
            head = vec.subarray(hh * D, (hh + 1) * D);
            // rotate_half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), angle pos * inv_freq[i].
            for (let i = 0; i < D / 2; i++) {
              const a = Math.fround(Math.fround(pos) * Math.fround(invFreq[i]!));
              const c = Math.cos(a);
              const s = Math.sin(a);
              const x1 = head[i]!;
              const x2 = head[i + D / 2]!;
              head[i] = x1 * c - x2 * s;
              head[i + D / 2] = x2 * c + x1 * s;
            }
          }
        }
      }
      const attn = Array.from({ length: n }, () => new Float64Array(NH * D));
      const group = NH / NKV;
      for (let pos = 0; pos < n; pos++) {
        for (let hh = 0; hh < NH; hh++) {
          const kv = Math.floor(hh / group);
          const scores: number[] = [];
          for (let j = 0; j <= pos; j++) {
            let s = 0;
            for (let d = 0; d < D; d++) s += q[pos]![hh * D + d]! * k[j]![kv * D + d]!;
            scores.push(s / Math.sqrt(D));
          }
          const m = Math.max(...scores);
          const e = scores.map((s) => Math.exp(s - m));
          const z = e.reduce((a, b) => a + b, 0);
          for (let j = 0; j <= pos; j++) for (let d = 0; d < D; d++) attn[pos]![hh * D + d]! += (e[j]! / z) * v[j]![kv * D + d]!;
        }
      }
      for (let pos = 0; pos < n; pos++) {
        const o = linear(attn[pos]!, this.t(`${p}self_attn.o_proj.weight`), H);
        for (let d = 0; d < H; d++) h[pos]![d]! += o[d]!;
        const xn = rmsnorm(h[pos]!, this.t(`${p}post_attention_layernorm.weight`), eps);
        const g = linear(xn, this.t(`${p}mlp.gate_proj.weight`), I);
        const u = linear(xn, this.t(`${p}mlp.up_proj.weight`), I);
        const act = g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!);
        const down = linear(act, this.t(`${p}mlp.down_proj.weight`), H);
        for (let d = 0; d < H; d++) h[pos]![d]! += down[d]!;
      }
    }
    return h.map((r) => rmsnorm(r, this.t('model.norm.weight'), eps));
  }

  /** sentence-transformers: Pooling (mean over tokens, or the last token) then Normalize. */
  embed(tokens: readonly number[], pooling: 'mean' | 'last'): Float64Array {
    const hs = this.hidden(tokens);
    const out = new Float64Array(this.cfg.hidden);
    if (pooling === 'last') out.set(hs[hs.length - 1]!);
    else for (const r of hs) for (let d = 0; d < out.length; d++) out[d]! += r[d]! / hs.length;
    return normalized(out);
  }
}

export function normalized(v: Float64Array | Float32Array): Float64Array {
  let s = 0;
  for (const x of v) s += x * x;
  const inv = 1 / Math.max(Math.sqrt(s), 1e-12);
  return Float64Array.from(v, (x) => x * inv);
}

function rmsnorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let s = 0;
  for (const v of x) s += v * v;
  const r = 1 / Math.sqrt(s / x.length + eps);
  return Float64Array.from(x, (v, i) => v * r * w[i]!);
}

/** y = W x (+ b), W row-major [out][in] as PyTorch stores nn.Linear. */
function linear(x: Float64Array, w: Float64Array, out: number, b?: Float64Array): Float64Array {
  const n = x.length;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b[o]! : 0;
    for (let i = 0; i < n; i++) s += w[o * n + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

export { maxAbsDiff } from './helpers.js';
