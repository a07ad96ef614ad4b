#!/usr/bin/python3
"""Writes a PEFT-applied golden fixture for the native engine's LoRA path.

  /usr/bin/python3 scripts/goldens/make_lora_goldens.py --model DIR --adapter DIR --out FILE.json \
      [--label NAME] [--make-tiny CMD] [--steps 24] [--prompt-seed 0]

The reference is transformers + peft themselves: the model loaded in float32, the adapter
applied with `PeftModel.from_pretrained` (unmerged), greedy decoding by full recompute. Records
per prompt the greedy continuation and the first step's logits, and the sha256 of the model's
and the adapter's weights. Needs torch, transformers and peft (the GPU machine has peft 0.21 and
transformers 5.17); elsewhere it says which are missing and exits 2.
"""
import argparse
import hashlib
import importlib
import json
import os
import random
import sys

PROMPT_LENGTHS = (1, 7, 23, 40)


def sha256_of(dir_, suffix=".safetensors"):
    h = hashlib.sha256()
    for name in sorted(os.listdir(dir_)):
        if name.endswith(suffix):
            with open(os.path.join(dir_, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def main():
    missing = [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"make_lora_goldens.py needs {', '.join(missing)} (pip install torch transformers peft); "
              "the GPU machine has them: run scripts/goldens/regenerate-lora.sh there", file=sys.stderr)
        sys.exit(2)
    import torch
    import transformers
    import peft
    from transformers import AutoModelForCausalLM
    from peft import PeftModel

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default=None)
    ap.add_argument("--make-tiny", default=None)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--prompt-seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, args.adapter).eval()
    vocab = base.config.vocab_size
    rng = random.Random(args.prompt_seed)
    cases = []
    with torch.no_grad():
        for n in PROMPT_LENGTHS:
            prompt = [rng.randrange(vocab) for _ in range(n)]
            ids = list(prompt)
            first = None
            for _ in range(args.steps):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                if first is None:
                    first = logits
                ids.append(int(logits.argmax()))
            cases.append({
                "prompt": prompt,
                "greedy": ids[len(prompt):],
                "first_logits": [float(f"{v:.7g}") for v in first.tolist()],
            })
    fixture = {
        "label": args.label or os.path.basename(os.path.normpath(args.model)),
        "reference": f"transformers {transformers.__version__} + peft {peft.__version__} (unmerged LoRA), torch {torch.__version__}",
        "vocab_size": vocab,
        "make_tiny": args.make_tiny,
        "weights_sha256": sha256_of(args.model),
        "adapter_sha256": sha256_of(args.adapter),
        "steps": args.steps,
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
