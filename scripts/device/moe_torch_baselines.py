"""Baselines for the MoE benchmark (scripts/device/moe-check.sh), measured in the same run:

  matmul        torch.matmul TFLOP/s of a bf16 8192^3 product and of the 2048-row expert-shaped
                product [2048 x 2048] . [1536 x 2048]^T (torch_baselines.matmul_tflops)
  transformers  `generate` tok/s of Qwen3MoeForCausalLM in the Qwen3-30B-A3B shape (random bf16
                weights, built on the GPU: no checkpoint on disk), batch 1 (ISL 128, 32 new
                tokens) and batch 64 (ISL 128, 8 new tokens), greedy, sdpa attention, EOS ignored

  python3 scripts/device/moe_torch_baselines.py --out moe-torch.json
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baselines import matmul_tflops  # noqa: E402

QWEN3_30B_A3B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                     num_attention_heads=32, num_key_value_heads=4, head_dim=128, max_position_embeddings=40960,
                     rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, num_experts=128,
                     num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
                     mlp_only_layers=[])


def generate_tok_s(model, batch, isl, osl):
    ids = torch.randint(3, model.config.vocab_size, (batch, isl), device="cuda")
    kw = dict(max_new_tokens=osl, min_new_tokens=osl, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids[:, :16], **{**kw, "max_new_tokens": 2, "min_new_tokens": 2})
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    new = out.shape[1] - isl
    return {"batch": batch, "isl": isl, "osl": new, "seconds": dt, "tok_per_s": batch * new / dt}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--skip-transformers", action="store_true")
    args = p.parse_args()
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    report["matmul_tflops"] = matmul_tflops(8192, 8192, 8192)
    report["matmul_expert_2048_tflops"] = matmul_tflops(2048, 1536, 2048)
    print(f"torch.matmul 8192^3: {report['matmul_tflops']:.1f} TFLOP/s; 2048x1536x2048: {report['matmul_expert_2048_tflops']:.1f}", flush=True)
    json.dump(report, open(args.out, "w"), indent=2)
    if args.skip_transformers:
        return
    import transformers
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    report["transformers_version"] = transformers.__version__
    config = Qwen3MoeConfig(**QWEN3_30B_A3B)
    config._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3MoeForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    report["transformers_build_seconds"] = time.perf_counter() - t0
    print(f"built the model in {report['transformers_build_seconds']:.0f} s", flush=True)
    for batch, osl in ((1, 32), (64, 8)):
        r = generate_tok_s(model, batch, 128, osl)
        report[f"transformers_generate_b{batch}"] = r
        report[f"transformers_generate_b{batch}_tok_s"] = r["tok_per_s"]
        print(f"transformers generate batch {batch}: {r['tok_per_s']:.1f} tok/s", flush=True)
        json.dump(report, open(args.out, "w"), indent=2)


if __name__ == "__main__":
    main()
