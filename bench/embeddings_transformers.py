#!/usr/bin/env python3
"""The transformers side of bench/embeddings.ts: the same model directory and inputs (JSON on
stdin, equal lengths so no padding), AutoModel forward on the CPU, mean pooling of
last_hidden_state, L2 normalization. Prints {seqsPerSec, batchSeconds, seqsPerCpuSec, version}.

  python3 bench/embeddings_transformers.py MODEL_DIR THREADS BATCHES < inputs.json
"""
import json
import resource
import sys
import time

import torch
import transformers
from transformers import AutoModel


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    model_dir, threads, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    inputs = json.load(sys.stdin)
    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor(inputs)
    mask = torch.ones_like(ids)

    def run():
        with torch.inference_mode():
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            v = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            return torch.nn.functional.normalize(v, p=2, dim=1)

    run()  # warm-up
    seconds = []
    c0 = cpu_seconds()
    for _ in range(batches):
        t0 = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - t0)
    cpu = cpu_seconds() - c0
    seconds_sorted = sorted(seconds)
    print(json.dumps({
        "seqsPerSec": len(inputs) / seconds_sorted[len(seconds_sorted) // 2],
        "batchSeconds": seconds,
        "seqsPerCpuSec": len(inputs) * batches / cpu,
        "version": f"transformers {transformers.__version__}, torch {torch.__version__}",
    }))


if __name__ == "__main__":
    main()
