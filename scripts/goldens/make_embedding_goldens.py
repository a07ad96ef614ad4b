#!/usr/bin/env python3
"""Writes an embedding golden fixture with sentence-transformers from a make-tiny embedding model.

  python3 scripts/goldens/make_embedding_goldens.py --model DIR --out FILE.json \\
      [--label NAME] [--make-tiny "runtime model make-tiny ..."]

The model dir comes from `runtime model make-tiny --arch qwen3 --dtype f32 --embedding mean|last`
(a Transformer -> Pooling -> Normalize sentence-transformers layout). For token-id inputs of
lengths 1, 7, 16 and 40 (fixed seed) the fixture records SentenceTransformer's
`sentence_embedding` computed from those ids (one input per forward, no padding), and for a few
texts the ids its tokenizer produced and `encode(text)`: the native engine (pooling step) and the
frontend's tokenizer are checked against them by test/native/embedding-goldens.test.ts.

Needs `sentence-transformers` (and torch). Without it this prints what is missing and exits 3.
"""
import argparse
import hashlib
import json
import os
import random
import sys

LENGTHS = (1, 7, 16, 40)
TEXTS = ("hello world", "The quick brown fox jumps over the lazy dog.", "embeddings 123")


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
    ap.add_argument("--make-tiny", default=None)
    ap.add_argument("--prompt-seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import torch
        import sentence_transformers
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        print(f"embedding goldens need sentence-transformers and torch, missing here: {e.name} "
              "(pip install sentence-transformers; the GPU machine has 6.0.1)", file=sys.stderr)
        sys.exit(3)

    model = SentenceTransformer(args.model, device="cpu")
    model.eval()
    pooling = json.load(open(os.path.join(args.model, "1_Pooling", "config.json")))
    mode = "last" if pooling.get("pooling_mode_lasttoken") else "mean"
    vocab = json.load(open(os.path.join(args.model, "config.json")))["vocab_size"]
    rng = random.Random(args.prompt_seed)
    cases = []
    with torch.no_grad():
        for n in LENGTHS:
            ids = [rng.randrange(vocab) for _ in range(n)]
            features = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, n, dtype=torch.long)}
            vec = model(features)["sentence_embedding"][0].float().tolist()
            cases.append({"token_ids": ids, "embedding": [float(f"{v:.8g}") for v in vec]})
        texts = []
        for text in TEXTS:
            ids = model.tokenizer(text)["input_ids"]
            vec = model.encode(text, convert_to_numpy=True).tolist()
            texts.append({"text": text, "token_ids": ids, "embedding": [float(f"{v:.8g}") for v in vec]})
    fixture = {
        "label": args.label or os.path.basename(os.path.normpath(args.model)),
        "reference": "sentence-transformers SentenceTransformer (Transformer -> Pooling -> Normalize)",
        "sentence_transformers_version": sentence_transformers.__version__,
        "torch_version": torch.__version__,
        "pooling": mode,
        "make_tiny": args.make_tiny,
        "weights_sha256": weights_sha256(args.model),
        "cases": cases,
        "texts": texts,
    }
    with open(args.out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"{fixture['label']}: {len(cases)} token cases, {len(texts)} texts, pooling {mode}", file=sys.stderr)


if __name__ == "__main__":
    main()
