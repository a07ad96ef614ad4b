#!/usr/bin/python3
"""Writes a golden fixture for the native engine from a model directory.

  /usr/bin/python3 scripts/goldens/make_goldens.py --model DIR --out FILE.json \
      [--label NAME] [--steps 32] [--prompt-seed 0]

Records, for a few prompts (token ids drawn with a fixed seed, lengths 1, 7, 23 and 40 so
that prompts span partial and several full KV blocks of 16), the greedy continuation for
--steps tokens and the logits of the first step (last prompt position). The model dir should
come from `runtime model make-tiny` with a fixed seed (see native/README.md); the fixture
stores the sha256 of its weights so tests notice when make-tiny's output changes.
"""
import argparse
import hashlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import Reference  # noqa: E402

PROMPT_LENGTHS = (1, 7, 23, 40)


def weights_sha256(model_dir):
    h = hashlib.sha256()
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with open(os.path.join(model_dir, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default=None)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt-seed", type=int, default=0)
    ap.add_argument("--make-tiny", default=None, help="the make-tiny command that made --model, for the record")
    args = ap.parse_args()

    ref = Reference(args.model)
    vocab = ref.config["vocab_size"]
    rng = random.Random(args.prompt_seed)
    cases = []
    for n in PROMPT_LENGTHS:
        prompt = [rng.randrange(vocab) for _ in range(n)]
        first = ref.logits(prompt)[-1]
        prompt_gap = min((float(g.min()) for g in ref.routing_gaps), default=None)
        greedy, margin = ref.greedy(prompt, args.steps)
        assert greedy[0] == int(first.argmax())
        case = {
            "prompt": prompt,
            "greedy": greedy,
            "min_greedy_margin": round(margin, 6),
            "first_logits": [float(f"{v:.7g}") for v in first.tolist()],
        }
        if prompt_gap is not None:  # mixtures of experts: how close the routing came to a flip
            case["min_prompt_routing_gap"] = round(prompt_gap, 6)
            case["step_routing_gaps"] = [round(g, 6) for g in ref.step_routing_gaps]
        cases.append(case)
        print(f"{args.label or args.model}: prompt {n} tokens -> {args.steps} greedy tokens, "
              f"min top1-top2 margin {margin:.4f}", file=sys.stderr)

    fixture = {
        "label": args.label or os.path.basename(os.path.normpath(args.model)),
        "reference": "scripts/goldens/reference.py (PyTorch re-implementation of transformers' modeling code)",
        "torch_version": __import__("torch").__version__,
        "architecture": ref.arch,
        "vocab_size": vocab,
        "make_tiny": args.make_tiny,
        "weights_sha256": weights_sha256(args.model),
        "steps": args.steps,
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
