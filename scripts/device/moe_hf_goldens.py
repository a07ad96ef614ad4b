"""Golden fixtures from transformers itself for the MoE and YaRN make-tiny models (issue 36).

The committed fixtures (test/fixtures/goldens/*.json) come from scripts/goldens/reference.py, an
independent PyTorch re-implementation of transformers' modeling code, because transformers is
not installed where they were made. This runs transformers (AutoModelForCausalLM, f32, eager
attention, CPU) on the same make-tiny models and the same prompts, writes fixtures in the same
format, and compares: first-step logits within 1e-3 and the 32 greedy tokens equal (a token may
differ only where the reference's own top-1/top-2 margin is under 1e-3).

  python3 scripts/device/moe_hf_goldens.py --models DIR --fixtures test/fixtures/goldens \
      --labels qwen3-moe-f32,mixtral-f32 --out moe-hf-goldens.json
  python3 scripts/device/moe_hf_goldens.py --split moe-hf-goldens.json --into test/fixtures/goldens
      (writes each fixture as LABEL.json, "reference": "transformers X.Y": what a GPU session commits)
"""
import argparse
import hashlib
import json
import os
import sys

import torch


def weights_sha256(model_dir):
    h = hashlib.sha256()
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with open(os.path.join(model_dir, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


@torch.no_grad()
def run(model, prompt, steps):
    tokens = list(prompt)
    first = None
    greedy, margin = [], float("inf")
    for _ in range(steps):
        last = model(torch.tensor([tokens])).logits[0, -1].float()
        if first is None:
            first = last
        top2 = torch.topk(last, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        greedy.append(nxt)
        tokens.append(nxt)
    return first, greedy, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models")
    ap.add_argument("--fixtures")
    ap.add_argument("--labels")
    ap.add_argument("--out")
    ap.add_argument("--split")
    ap.add_argument("--into")
    args = ap.parse_args()
    if args.split:
        for label, f in json.load(open(args.split))["fixtures"].items():
            with open(os.path.join(args.into, label + ".json"), "w") as out:
                json.dump(f, out, separators=(",", ":"))
                out.write("\n")
        return
    import transformers
    from transformers import AutoModelForCausalLM

    report = {"transformers": transformers.__version__, "torch": torch.__version__, "fixtures": {}, "comparison": {}}
    ok = True
    for label in args.labels.split(","):
        ref = json.load(open(os.path.join(args.fixtures, label + ".json")))
        model_dir = os.path.join(args.models, label)
        sha = weights_sha256(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
        cases, worst, mismatches = [], 0.0, []
        for i, c in enumerate(ref["cases"]):
            first, greedy, margin = run(model, c["prompt"], ref["steps"])
            diff = float((first - torch.tensor(c["first_logits"])).abs().max())
            worst = max(worst, diff)
            for j, (a, b) in enumerate(zip(greedy, c["greedy"])):
                if a != b:
                    mismatches.append({"case": i, "token": j, "transformers": a, "reference": b, "reference_min_margin": c["min_greedy_margin"]})
                    break
            cases.append({"prompt": c["prompt"], "greedy": greedy, "min_greedy_margin": round(margin, 6),
                          "first_logits": [float(f"{v:.7g}") for v in first.tolist()]})
        fixture = dict(ref)
        fixture.update({"reference": f"transformers {transformers.__version__} (AutoModelForCausalLM, f32, eager, CPU)",
                        "torch_version": torch.__version__, "cases": cases})
        report["fixtures"][label] = fixture
        good = sha == ref["weights_sha256"] and worst < 1e-3 and all(m["reference_min_margin"] < 1e-3 for m in mismatches)
        ok = ok and good
        report["comparison"][label] = {"weights_match": sha == ref["weights_sha256"], "first_logits_max_abs_diff": worst,
                                       "greedy_mismatches": mismatches, "agree": good}
        print(f"{label}: weights {'match' if sha == ref['weights_sha256'] else 'DIFFER'}, first logits max diff {worst:.2e}, "
              f"{len(mismatches)} greedy mismatches -> {'agree' if good else 'DISAGREE'}", flush=True)
    json.dump(report, open(args.out, "w"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
