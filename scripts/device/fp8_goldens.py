"""Reference greedy tokens and first-step logits for an FP8 checkpoint (scripts/device/fp8-check.sh).

  python3 scripts/device/fp8_goldens.py --model DIR --out ref.json [--steps 16] [--device cuda]

Where transformers is installed and loads the checkpoint's format (quant_method "fp8" with
weight_block_size: its FineGrainedFP8 linear layers, activations quantized per token group as
ours), the reference is transformers itself, run on the checkpoint ("transformers-fp8").
Otherwise the checkpoint is dequantized here (e4m3 code x scale, in f32, from the OCP E4M3 table
and the format's scale tensors) and run through transformers ("transformers-dequantized") or,
without transformers, through scripts/goldens/reference.py ("reference-dequantized"). The
engine's W8A8 result then differs from the reference by the activations' e4m3 rounding: the
comparison (fp8-goldens.mjs) allows that margin, and says which reference it had.
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch

PROMPT_LENGTHS = (1, 7, 23, 40)


def e4m3_table():
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            t[b] = np.nan
        elif e == 0:
            t[b] = s * (m / 8.0) * 2.0 ** -6
        else:
            t[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return t


def read_raw(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    kinds = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        raw = np.frombuffer(data[b:e], dtype=kinds[meta["dtype"]]).reshape(meta["shape"])
        out[name] = (meta["dtype"], raw)
    return out


def to_f32(dtype, raw):
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def dequantize(model_dir, out_dir):
    """Writes the dequantized checkpoint (F32) with the same config minus quantization_config."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    q = config.pop("quantization_config")
    block = q.get("weight_block_size")
    table = e4m3_table()
    tensors = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            tensors.update(read_raw(os.path.join(model_dir, name)))
    dense = {}
    for name, (dtype, raw) in tensors.items():
        if name.endswith(("_scale", "_scale_inv")):
            continue  # weight, input and KV scales: folded in below, or not part of a dense model
        if dtype != "F8_E4M3":
            dense[name] = to_f32(dtype, raw)
            continue
        module = name[: -len(".weight")]
        scale_name = module + (".weight_scale_inv" if module + ".weight_scale_inv" in tensors else ".weight_scale")
        s = to_f32(*tensors[scale_name])
        w = table[raw]
        rows, cols = w.shape
        if s.size == 1:
            s = np.full((rows, 1), float(s.reshape(-1)[0]), dtype=np.float32)  # per tensor
        elif s.shape in ((rows, 1), (rows,)):
            s = s.reshape(rows, 1)  # per channel
        else:
            bn, bk = block  # per [bn, bk] block
            s = np.repeat(np.repeat(s, bn, axis=0)[:rows], bk, axis=1)[:, :cols]
        dense[name] = (w * s).astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    header, blobs, offset = {}, [], 0
    for name in sorted(dense):
        arr = np.ascontiguousarray(dense[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    config["torch_dtype"] = "float32"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f)
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model_dir, extra)):
            shutil.copy(os.path.join(model_dir, extra), out_dir)


class TransformersModel:
    def __init__(self, model_dir, device, fp8):
        from transformers import AutoModelForCausalLM

        kw = {"dtype": torch.bfloat16} if fp8 else {"dtype": torch.float32}
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, **kw).to(device).eval()
        self.device = device

    @torch.no_grad()
    def logits(self, ids):
        x = torch.tensor([ids], device=self.device)
        return self.model(x).logits[0].float().cpu()


def greedy(model, prompt, steps):
    tokens, out, margins = list(prompt), [], []
    for _ in range(steps):
        last = model.logits(tokens)[-1]
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        out.append(nxt)
        tokens.append(nxt)
    return out, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    kind, why, model = None, [], None
    try:
        model = TransformersModel(args.model, args.device, True)
        kind = "transformers-fp8"
    except Exception as e:  # transformers missing, or it does not load this format
        why.append(f"transformers on the FP8 checkpoint: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    tmp = None
    if model is None:
        tmp = tempfile.mkdtemp(prefix="fp8-dequantized-")
        dequantize(args.model, tmp)
        try:
            model = TransformersModel(tmp, args.device, False)
            kind = "transformers-dequantized"
        except Exception as e:
            why.append(f"transformers on the dequantized checkpoint: {type(e).__name__}")
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "goldens"))
            from reference import Reference

            model = Reference(tmp)
            kind = "reference-dequantized"
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    rng = random.Random(0)
    cases = []
    for n in PROMPT_LENGTHS:
        prompt = [rng.randrange(vocab) for _ in range(n)]
        first = model.logits(prompt)[-1]
        tokens, margins = greedy(model, prompt, args.steps)
        cases.append({"prompt": prompt, "greedy": tokens, "margins": [round(m, 5) for m in margins],
                      "first_logits": [float(f"{v:.7g}") for v in first.tolist()]})
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "reference": kind, "why": why, "cases": cases}, f)
    print(f"{os.path.basename(args.model.rstrip('/'))}: reference {kind}" + (f" ({'; '.join(why)})" if why else ""))
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
