"""Reference forward pass for the golden fixtures, in plain PyTorch.

There is no `transformers` package on the machines that made the committed fixtures, so this
follows transformers' modeling code (LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM / Qwen3ForCausalLM, transformers 4.51, eager attention) line by line:
RMSNorm computed in f32, rotate_half RoPE with cos/sin from cat(freqs, freqs), llama3 rope
scaling (_compute_llama3_parameters), GQA through repeat_kv, causal softmax in f32, SiLU MLP,
tied embeddings. It is written independently of the C++ engine on purpose: the two must agree.
Runs with Debian's python3-torch (1.13): /usr/bin/python3.

Mixtures of experts (MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM) follow the
sparse MoE blocks: router logits, softmax in f32, torch.topk, renormalized when norm_topk_prob
(Mixtral always), each hit expert's SwiGLU over its tokens times the routing weight, summed with
index_add_ in expert order; Qwen2-MoE adds sigmoid(shared_expert_gate(x)) * shared_expert(x).
Layer l is sparse unless listed in mlp_only_layers and when (l + 1) % decoder_sparse_step == 0.
YaRN (rope_type "yarn") follows _compute_yarn_parameters: blended inverse frequencies over the
correction range of beta_fast..beta_slow rotations, and cos/sin times the attention factor.
"""
import json
import math
import os
import struct

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    """Minimal safetensors reader (the `safetensors` package is not installed here)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype=_DTYPES[meta["dtype"]])
        if meta["dtype"] == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        out[name] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
    return out


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    weights = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            weights.update(read_safetensors(os.path.join(model_dir, name)))
    return config, weights


def yarn_parameters(config, head_dim, scaling):
    """(inv_freq, attention_factor) of rope_type "yarn"."""
    base = float(config.get("rope_theta", 10000.0))
    dim = head_dim
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings") or config["max_position_embeddings"]

    def mscale_of(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = mscale_of(factor, mscale) / mscale_of(factor, mscale_all_dim)
        else:
            attention_factor = mscale_of(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1: the original frequency, 0: divided by factor
    return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)


def rope_inv_freq(config, head_dim):
    """(inv_freq, attention_scaling) as the model's rotary embedding computes them."""
    base = float(config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "yarn":
        return yarn_parameters(config, head_dim, scaling)
    assert kind == "llama3", kind
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama), 1.0


def rms_norm(x, weight, eps):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class MoeSpec:
    """Which layers are sparse and how their tensors are named, from config.json."""

    @staticmethod
    def of(c, arch):
        if arch not in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
            return None
        m = MoeSpec()
        mixtral = arch == "MixtralForCausalLM"
        m.num_experts = c["num_local_experts"] if mixtral else c["num_experts"]
        m.top_k = c["num_experts_per_tok"]
        m.norm_topk_prob = True if mixtral else c.get("norm_topk_prob", False)
        m.block = "block_sparse_moe" if mixtral else "mlp"
        m.names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        m.step = 1 if mixtral else c.get("decoder_sparse_step", 1)
        m.only = [] if mixtral else list(c.get("mlp_only_layers") or [])
        m.shared = arch == "Qwen2MoeForCausalLM"
        return m

    def sparse(self, layer):
        return layer not in self.only and self.num_experts > 0 and (layer + 1) % self.step == 0


class Reference:
    def __init__(self, model_dir):
        self.config, self.w = load_model(model_dir)
        c = self.config
        arch = c["architectures"][0]
        self.arch = arch
        self.hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.qk_norm = arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
        self.inv_freq, self.attention_scaling = rope_inv_freq(c, self.head_dim)
        self.moe = MoeSpec.of(c, arch)
        # Per sparse layer of the last logits() call: each position's routing gap, the k-th
        # probability's lead over the (k+1)-th relative to it. Under bf16 a gap of a few tenths
        # of a percent can flip the choice (engine_test.cc's golden check reads these).
        self.routing_gaps = []
        tied = c.get("tie_word_embeddings", False)
        self.lm_head = self.w["model.embed_tokens.weight"] if tied else self.w["lm_head.weight"]

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    @torch.no_grad()
    def logits(self, token_ids):
        """Logits at every position of one sequence: [seq, vocab]."""
        self.routing_gaps = []
        ids = torch.tensor(token_ids, dtype=torch.long)[None, :]
        s = ids.shape[1]
        x = self.w["model.embed_tokens.weight"][ids]
        position_ids = torch.arange(s)[None, :]
        freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * self.attention_scaling)[:, None], (emb.sin() * self.attention_scaling)[:, None]
        mask = torch.full((s, s), float("-inf")).triu(1)
        scaling = self.head_dim ** -0.5
        for l in range(self.layers):
            p = f"model.layers.{l}."
            residual = x
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(h, p + "self_attn.q_proj").view(1, s, -1, self.head_dim)
            k = self.linear(h, p + "self_attn.k_proj").view(1, s, -1, self.head_dim)
            v = self.linear(h, p + "self_attn.v_proj").view(1, s, -1, self.head_dim)
            if self.qk_norm:
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = repeat_kv(k, self.heads // self.kv_heads)
            v = repeat_kv(v, self.heads // self.kv_heads)
            attn = (q @ k.transpose(2, 3)) * scaling + mask
            attn = torch.softmax(attn, dim=-1, dtype=torch.float32)
            out = (attn @ v).transpose(1, 2).reshape(1, s, -1)
            x = residual + self.linear(out, p + "self_attn.o_proj")
            residual = x
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            if self.moe is not None and self.moe.sparse(l):
                x = residual + self.sparse_moe(h[0], p).view(1, s, -1)
            else:
                x = residual + self.mlp(h, p + "mlp", ("gate_proj", "up_proj", "down_proj"))
        x = rms_norm(x, self.w["model.norm.weight"], self.eps)
        return (x @ self.lm_head.T)[0]

    def mlp(self, h, prefix, names):
        gate = self.linear(h, f"{prefix}.{names[0]}")
        up = self.linear(h, f"{prefix}.{names[1]}")
        return self.linear(torch.nn.functional.silu(gate) * up, f"{prefix}.{names[2]}")

    def sparse_moe(self, h, layer_prefix):
        """One sparse MoE block over [tokens, hidden] rows."""
        m = self.moe
        block = layer_prefix + m.block
        router_logits = self.linear(h, block + ".gate")
        routing_weights = torch.softmax(router_logits, dim=1, dtype=torch.float)
        if m.top_k < m.num_experts:
            top = torch.topk(routing_weights, m.top_k + 1, dim=-1).values
            self.routing_gaps.append((top[:, m.top_k - 1] - top[:, m.top_k]) / top[:, m.top_k - 1])
        routing_weights, selected = torch.topk(routing_weights, m.top_k, dim=-1)
        if m.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        # expert_mask[e, slot, token]: which tokens chose expert e in which top-k slot.
        expert_mask = torch.nn.functional.one_hot(selected, num_classes=m.num_experts).permute(2, 1, 0)
        for e in range(m.num_experts):
            slot, token = torch.where(expert_mask[e])
            if token.numel() == 0:
                continue
            y = self.mlp(h[token], f"{block}.experts.{e}", m.names) * routing_weights[token, slot, None]
            out.index_add_(0, token, y)
        if m.shared:
            gate = torch.sigmoid(self.linear(h, block + ".shared_expert_gate"))
            out = out + gate * self.mlp(h, block + ".shared_expert", ("gate_proj", "up_proj", "down_proj"))
        return out

    def greedy(self, prompt, steps):
        """Greedy continuation; also the smallest top-1/top-2 logit margin met on the way."""
        tokens = list(prompt)
        out = []
        min_margin = float("inf")
        self.step_routing_gaps = []  # per step: the smallest routing gap of the token it computes
        for _ in range(steps):
            last = self.logits(tokens)[-1]
            if self.routing_gaps:
                self.step_routing_gaps.append(min(float(g[-1]) for g in self.routing_gaps))
            top2 = torch.topk(last, 2).values
            min_margin = min(min_margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            out.append(nxt)
            tokens.append(nxt)
        return out, min_margin
