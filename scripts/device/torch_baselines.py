"""Baselines measured on the GPU machine in the same run as the engine benchmark.

  matmul        torch.matmul TFLOP/s (bf16, a @ w.T) on every GEMM shape of gemm.json
                (tandem_gpu_bench gemm), timed with CUDA events, median of 5 after warm-up;
  transformers  `generate` tok/s on the Qwen2-0.5B-shaped random model directory at batch 1
                and 64 (ISL 128, OSL 64, greedy, bf16, sdpa attention, ignoring EOS).

  python3 scripts/device/torch_baselines.py --model DIR --gemm-json gemm.json --out torch.json
"""
import argparse
import json
import time

import torch


def matmul_tflops(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    copies = max(1, min(8, (256 << 20) // max(1, n * k * 2)))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    flops = 2.0 * m * n * k
    reps = max(1, int(min(200, 2e11 / flops)))
    for i in range(3):
        torch.matmul(a, ws[i % copies].t())
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(reps):
            torch.matmul(a, ws[i % copies].t())
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1000 / reps)
    samples.sort()
    return flops / samples[len(samples) // 2] / 1e12


def generate_tok_s(model_dir, batch, isl, osl):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (batch, isl), device="cuda")
    kw = dict(max_new_tokens=osl, min_new_tokens=osl, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids[:, :16], **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    new = out.shape[1] - isl
    del model
    torch.cuda.empty_cache()
    return {"batch": batch, "isl": isl, "osl": new, "seconds": dt, "tok_per_s": batch * new / dt}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--gemm-json")
    p.add_argument("--out", required=True)
    p.add_argument("--osl", type=int, default=64)
    args = p.parse_args()
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    try:
        import transformers

        report["transformers_version"] = transformers.__version__
    except ImportError:
        pass
    if args.gemm_json:
        cases = json.load(open(args.gemm_json))["cases"]
        report["matmul"] = []
        seen = set()
        for c in cases:
            key = (c["m"], c["n"], c["k"])
            if key in seen:
                continue
            seen.add(key)
            report["matmul"].append({"m": c["m"], "n": c["n"], "k": c["k"], "tflops": matmul_tflops(*key)})
            print(f"torch.matmul {key}: {report['matmul'][-1]['tflops']:.1f} TFLOP/s", flush=True)
        json.dump(report, open(args.out, "w"), indent=2)
    if args.model:
        report["transformers"] = {}
        for batch in (1, 64):
            r = generate_tok_s(args.model, batch, 128, args.osl)
            report["transformers"][f"batch{batch}"] = r
            print(f"transformers generate batch {batch}: {r['tok_per_s']:.1f} tok/s", flush=True)
    json.dump(report, open(args.out, "w"), indent=2)


if __name__ == "__main__":
    main()
