"""Reference forward pass for the golden fixtures, in plain PyTorch.

There is no `transformers` package on the machines that made the committed fixtures, so this
follows transformers' modeling code (LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM / Qwen3ForCausalLM, transformers 4.51, eager attention) line by line:
RMSNorm computed in f32, rotate_half RoPE with cos/sin from cat(freqs, freqs), llama3 rope
scaling (_compute_llama3_parameters), GQA through repeat_kv, causal softmax in f32, SiLU MLP,
tied embeddings. It is written independently of the C++ engine on purpose: the two must agree.
Runs with Debian's python3-torch (1.13): /usr/bin/python3.
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


def rope_inv_freq(config, head_dim):
    base = float(config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
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
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


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
        self.qk_norm = arch == "Qwen3ForCausalLM"
        self.inv_freq = rope_inv_freq(c, self.head_dim)
        tied = c.get("tie_word_embeddings", False)
        self.lm_head = self.w["model.embed_tokens.weight"] if tied else self.w["lm_head.weight"]

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    @torch.no_grad()
    def logits(self, token_ids):
        """Logits at every position of one sequence: [seq, vocab]."""
        ids = torch.tensor(token_ids, dtype=torch.long)[None, :]
        s = ids.shape[1]
        x = self.w["model.embed_tokens.weight"][ids]
        position_ids = torch.arange(s)[None, :]
        freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
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
            gate = self.linear(h, p + "mlp.gate_proj")
            up = self.linear(h, p + "mlp.up_proj")
            x = residual + self.linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
        x = rms_norm(x, self.w["model.norm.weight"], self.eps)
        return (x @ self.lm_head.T)[0]

    def greedy(self, prompt, steps):
        """Greedy continuation; also the smallest top-1/top-2 logit margin met on the way."""
        tokens = list(prompt)
        out = []
        min_margin = float("inf")
        for _ in range(steps):
            last = self.logits(tokens)[-1]
            top2 = torch.topk(last, 2).values
            min_margin = min(min_margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            out.append(nxt)
            tokens.append(nxt)
        return out, min_margin
