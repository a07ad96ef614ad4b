import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  SafetensorsFile,
  TINY_ARCHS,
  TINY_VOCAB_SIZE,
  makeTinyModel,
  readSafetensorsHeader,
  type TinyArch,
  type TinyModelInfo,
} from '../../workers/models/index.js';
import { loadTokenizer } from '../../frontend/preprocess/index.js';

let root: string;
const made = new Map<TinyArch, TinyModelInfo>();
const dirOf = (arch: TinyArch) => join(root, arch);
const readJson = async (arch: TinyArch, file: string) => JSON.parse(await readFile(join(dirOf(arch), file), 'utf8')) as Record<string, any>;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tandem-tiny-'));
  for (const arch of TINY_ARCHS) made.set(arch, await makeTinyModel({ arch, outDir: dirOf(arch) }));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** The exact state dict transformers builds for each class, with [out, in] linear shapes. */
function expectedTensors(arch: TinyArch): Map<string, number[]> {
  const v = TINY_VOCAB_SIZE;
  const headDim = arch === 'qwen3' || arch === 'qwen3_moe' ? 32 : 16;
  const q = 4 * headDim;
  const kv = 2 * headDim;
  const layers = arch === 'qwen3_moe' ? [0, 1, 2] : [0, 1];
  const m = new Map<string, number[]>([['model.embed_tokens.weight', [v, 64]], ['model.norm.weight', [64]]]);
  if (arch === 'llama' || arch === 'mixtral' || arch === 'qwen2_moe') m.set('lm_head.weight', [v, 64]);
  const mlp = (prefix: string, inter: number, names = ['gate_proj', 'up_proj', 'down_proj']): void => {
    m.set(`${prefix}.${names[0]}.weight`, [inter, 64]);
    m.set(`${prefix}.${names[1]}.weight`, [inter, 64]);
    m.set(`${prefix}.${names[2]}.weight`, [64, inter]);
  };
  for (const l of layers) {
    const p = `model.layers.${l}`;
    m.set(`${p}.input_layernorm.weight`, [64]);
    m.set(`${p}.post_attention_layernorm.weight`, [64]);
    m.set(`${p}.self_attn.q_proj.weight`, [q, 64]);
    m.set(`${p}.self_attn.k_proj.weight`, [kv, 64]);
    m.set(`${p}.self_attn.v_proj.weight`, [kv, 64]);
    m.set(`${p}.self_attn.o_proj.weight`, [64, q]);
    if (arch === 'qwen3_moe' && l !== 1) {
      // Qwen3MoeSparseMoeBlock: mlp.gate (router) and mlp.experts.N (layer 1 is in mlp_only_layers)
      m.set(`${p}.mlp.gate.weight`, [8, 64]);
      for (let e = 0; e < 8; e++) mlp(`${p}.mlp.experts.${e}`, 32);
    } else if (arch === 'mixtral') {
      // MixtralSparseMoeBlock as published: block_sparse_moe.gate, experts.N.w1 (gate) / w3 (up) / w2 (down)
      m.set(`${p}.block_sparse_moe.gate.weight`, [4, 64]);
      for (let e = 0; e < 4; e++) mlp(`${p}.block_sparse_moe.experts.${e}`, 64, ['w1', 'w3', 'w2']);
    } else if (arch === 'qwen2_moe') {
      m.set(`${p}.mlp.gate.weight`, [8, 64]);
      for (let e = 0; e < 8; e++) mlp(`${p}.mlp.experts.${e}`, 32);
      mlp(`${p}.mlp.shared_expert`, 64);
      m.set(`${p}.mlp.shared_expert_gate.weight`, [1, 64]);
    } else {
      mlp(`${p}.mlp`, 128);
    }
    if (arch === 'qwen2' || arch === 'qwen2_moe') {
      m.set(`${p}.self_attn.q_proj.bias`, [q]);
      m.set(`${p}.self_attn.k_proj.bias`, [kv]);
      m.set(`${p}.self_attn.v_proj.bias`, [kv]);
    }
    if (arch === 'qwen3' || arch === 'qwen3_moe') {
      m.set(`${p}.self_attn.q_norm.weight`, [headDim]);
      m.set(`${p}.self_attn.k_norm.weight`, [headDim]);
    }
  }
  return m;
}

function std(values: Float32Array): number {
  let s = 0;
  let s2 = 0;
  for (const x of values) {
    s += x;
    s2 += x * x;
  }
  const mean = s / values.length;
  return Math.sqrt(s2 / values.length - mean * mean);
}

describe('make-tiny: config.json', () => {
  it('llama: LlamaForCausalLM with GQA, llama3 rope scaling and an untied lm_head', async () => {
    const c = await readJson('llama', 'config.json');
    expect(c.architectures).toEqual(['LlamaForCausalLM']);
    expect(c).toMatchObject({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 16,
      vocab_size: TINY_VOCAB_SIZE,
      max_position_embeddings: 2048,
      rms_norm_eps: 1e-5,
      rope_theta: 500000,
      tie_word_embeddings: false,
      attention_bias: false,
      torch_dtype: 'bfloat16',
      hidden_act: 'silu',
    });
    expect(c.rope_scaling).toEqual({ rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 });
    // eos as a list (the Llama 3.1 form): <|end_of_text|>, <|eot_id|>
    expect(c.eos_token_id).toEqual([508, 511]);
    expect(c.bos_token_id).toBe(507);
  });

  it('qwen2: tied embeddings, no attention_bias field (biases are implied), 1e6 rope theta', async () => {
    const c = await readJson('qwen2', 'config.json');
    expect(c.architectures).toEqual(['Qwen2ForCausalLM']);
    expect(c).toMatchObject({ model_type: 'qwen2', tie_word_embeddings: true, rope_theta: 1000000, rms_norm_eps: 1e-6, use_sliding_window: false, num_key_value_heads: 2, head_dim: 16 });
    expect(c).not.toHaveProperty('attention_bias');
    expect(c.eos_token_id).toBe(511); // <|im_end|>
  });

  it('qwen3: head_dim decoupled from hidden_size / heads, attention_bias false', async () => {
    const c = await readJson('qwen3', 'config.json');
    expect(c.architectures).toEqual(['Qwen3ForCausalLM']);
    expect(c).toMatchObject({ model_type: 'qwen3', head_dim: 32, hidden_size: 64, num_attention_heads: 4, attention_bias: false, tie_word_embeddings: true });
  });

  it('qwen3_moe: Qwen3MoeForCausalLM with a dense layer among sparse ones, top-2 of 8 renormalized', async () => {
    const c = await readJson('qwen3_moe', 'config.json');
    expect(c.architectures).toEqual(['Qwen3MoeForCausalLM']);
    expect(c).toMatchObject({ model_type: 'qwen3_moe', num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32, norm_topk_prob: true, decoder_sparse_step: 1, mlp_only_layers: [1], num_hidden_layers: 3 });
  });

  it('mixtral and qwen2_moe: their MoE fields, Qwen2-MoE with a shared expert', async () => {
    expect(await readJson('mixtral', 'config.json')).toMatchObject({ architectures: ['MixtralForCausalLM'], model_type: 'mixtral', num_local_experts: 4, num_experts_per_tok: 2, intermediate_size: 64, sliding_window: null });
    expect(await readJson('qwen2_moe', 'config.json')).toMatchObject({
      architectures: ['Qwen2MoeForCausalLM'],
      model_type: 'qwen2_moe',
      num_experts: 8,
      num_experts_per_tok: 4,
      norm_topk_prob: false,
      shared_expert_intermediate_size: 64,
      tie_word_embeddings: false,
    });
  });

  it('--rope-scaling yarn: YaRN with max_position_embeddings = factor x original', async () => {
    const dir = join(root, 'qwen3-yarn');
    await makeTinyModel({ arch: 'qwen3', outDir: dir, ropeScaling: 'yarn' });
    const c = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
    expect(c.rope_scaling).toEqual({ rope_type: 'yarn', factor: 4, original_max_position_embeddings: 512, beta_fast: 32, beta_slow: 1 });
    expect(c.max_position_embeddings).toBe(c.rope_scaling.factor * c.rope_scaling.original_max_position_embeddings);
  });

  it('generation_config lists every end-of-turn id', async () => {
    expect((await readJson('llama', 'generation_config.json')).eos_token_id).toEqual([508, 511]);
    expect((await readJson('qwen2', 'generation_config.json')).eos_token_id).toEqual([511, 509]);
  });
});

describe('make-tiny: model.safetensors', () => {
  for (const arch of TINY_ARCHS) {
    it(`${arch}: exact HF tensor names and shapes, all BF16, data section fully covered`, async () => {
      const header = await readSafetensorsHeader(join(dirOf(arch), 'model.safetensors'));
      const expected = expectedTensors(arch);
      expect([...header.tensors.keys()].sort()).toEqual([...expected.keys()].sort());
      for (const [name, info] of header.tensors) {
        expect(info.shape, name).toEqual(expected.get(name));
        expect(info.dtype, name).toBe('BF16');
      }
      expect(header.metadata).toEqual({ format: 'pt' });
      expect(header.dataStart % 8).toBe(0);
    });
  }

  it('weights have the intended scales: embeddings ~0.4, linears gain/sqrt(fan_in), norms ~1', async () => {
    const f = await SafetensorsFile.read(join(dirOf('qwen2'), 'model.safetensors'));
    expect(std(f.float32('model.embed_tokens.weight'))).toBeCloseTo(0.4, 1);
    expect(std(f.float32('model.layers.0.mlp.up_proj.weight'))).toBeCloseTo(1 / Math.sqrt(64), 1);
    expect(std(f.float32('model.layers.0.mlp.down_proj.weight'))).toBeCloseTo(6 / Math.sqrt(128), 1);
    const norm = f.float32('model.norm.weight');
    const mean = norm.reduce((a, b) => a + b, 0) / norm.length;
    expect(mean).toBeGreaterThan(0.95);
    expect(mean).toBeLessThan(1.05);
    expect(std(norm)).toBeGreaterThan(0.05); // not all exactly 1: an unapplied weight would show
  });

  it('f32 and bf16 files hold the same draw: bf16 = round-to-nearest-even(f32)', async () => {
    const dir = join(root, 'llama-f32');
    await makeTinyModel({ arch: 'llama', outDir: dir, dtype: 'f32' });
    const c = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
    expect(c.torch_dtype).toBe('float32');
    const f32 = await SafetensorsFile.read(join(dir, 'model.safetensors'));
    const bf16 = await SafetensorsFile.read(join(dirOf('llama'), 'model.safetensors'));
    expect(f32.info('lm_head.weight').dtype).toBe('F32');
    const a = f32.float32('model.layers.1.self_attn.o_proj.weight');
    const b = bf16.float32('model.layers.1.self_attn.o_proj.weight');
    let maxRel = 0;
    for (let i = 0; i < a.length; i++) maxRel = Math.max(maxRel, Math.abs(a[i]! - b[i]!) / Math.abs(a[i]!));
    expect(maxRel).toBeGreaterThan(0);
    expect(maxRel).toBeLessThanOrEqual(2 ** -8); // half a bf16 ulp
  });
});

describe('make-tiny: determinism and size', () => {
  it('same seed gives byte-identical files; another seed changes only the weights', async () => {
    const again = join(root, 'qwen3-again');
    const other = join(root, 'qwen3-seed7');
    await makeTinyModel({ arch: 'qwen3', outDir: again, seed: 0 });
    await makeTinyModel({ arch: 'qwen3', outDir: other, seed: 7 });
    const files = (await readdir(dirOf('qwen3'))).sort();
    expect(files).toEqual(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    for (const f of files) {
      const base = await readFile(join(dirOf('qwen3'), f));
      expect(base.equals(await readFile(join(again, f))), f).toBe(true);
      expect(base.equals(await readFile(join(other, f))), f).toBe(f !== 'model.safetensors');
    }
  });

  it('every directory is under 5 MB', async () => {
    for (const arch of TINY_ARCHS) {
      let total = 0;
      for (const f of await readdir(dirOf(arch))) total += (await stat(join(dirOf(arch), f))).size;
      expect(total).toBe(made.get(arch)!.totalBytes);
      expect(total).toBeLessThan(5 * 1024 * 1024);
    }
  });
});

describe('make-tiny: tokenizer', () => {
  const samples = [
    'Hello world, the quick brown fox jumps over the lazy dog.',
    'Emoji 😀👍🏽🇫🇷 and CJK 中文字符 and 日本語のテキスト',
    "It's   spaced\n\n\tout\r\n  with trailing  ",
    'Ünïcödé çàfé — “quotes” … e\u0301 (decomposed)',
    '<|im_start|>user\nhi<|im_end|>',
    '12345678901234567890 3.14159 0xDEADBEEF',
    '\u0000\u0001 control bytes \u007f and a lone 💩',
  ];

  for (const arch of TINY_ARCHS) {
    it(`${arch}: loads with @huggingface/tokenizers and round-trips arbitrary UTF-8`, async () => {
      const tok = await loadTokenizer(dirOf(arch));
      expect(tok.vocabSize).toBe(TINY_VOCAB_SIZE);
      for (const s of samples) {
        const ids = tok.encode(s, { addSpecialTokens: false });
        expect(ids.every((id) => id >= 0 && id < TINY_VOCAB_SIZE)).toBe(true);
        expect(tok.decode(ids, { skipSpecialTokens: false })).toBe(s);
      }
    });
  }

  it('merges are real: frequent English words are single tokens', async () => {
    const tok = await loadTokenizer(dirOf('qwen2'));
    const json = await readJson('qwen2', 'tokenizer.json');
    expect(json.model.merges.length).toBeGreaterThanOrEqual(200);
    expect(json.model.merges.length).toBeLessThanOrEqual(400);
    for (const word of [' the', ' and', 'ing']) expect(tok.encode(word, { addSpecialTokens: false }), word).toHaveLength(1);
    expect(tok.encode(' the quick fox', { addSpecialTokens: false }).length).toBeLessThan(' the quick fox'.length / 2);
  });

  it('special tokens: ChatML ids for qwen, Llama 3 header tokens and BOS on encode for llama', async () => {
    const qwen = await loadTokenizer(dirOf('qwen2'));
    expect([qwen.tokenId('<|endoftext|>'), qwen.tokenId('<|im_start|>'), qwen.tokenId('<|im_end|>')]).toEqual([509, 510, 511]);
    expect(qwen.eosTokenId).toBe(511);
    expect(qwen.encode('<|im_start|>', { addSpecialTokens: false })).toEqual([510]);
    const llama = await loadTokenizer(dirOf('llama'));
    expect(llama.bosTokenId).toBe(507);
    expect(llama.tokenId('<|eot_id|>')).toBe(511);
    const ids = llama.encode('hi', { addSpecialTokens: true });
    expect(ids[0]).toBe(507);
    expect(llama.encode('hi', { addSpecialTokens: false })[0]).not.toBe(507);
  });
});
