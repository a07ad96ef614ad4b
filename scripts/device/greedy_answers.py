#!/usr/bin/env python3
"""Greedy answers of a serving frontend, for comparing two fleets token for token (the
kv-transfer and moe steps: aggregated against --prefill 1 --decode 1).

    python3 scripts/device/greedy_answers.py BASE_URL OUT_JSON LONG_WORDS

Seven prompts, the last LONG_WORDS words long; 16 tokens each at temperature 0, as token ids (a
random model's ids past its tokenizer's vocabulary decode to nothing, so text would hide a
difference). OUT_JSON gets {"answers": [[ids], ...], "routed": [the frontend's
tandem_frontend_disagg_requests_total lines]}: how each request went, beside its answer.
"""
import json
import sys
import urllib.request

base, out, long = sys.argv[1], sys.argv[2], int(sys.argv[3])


def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))


model = json.load(urllib.request.urlopen(base + "/v1/models", timeout=30))["data"][0]["id"]
words = "the quick brown fox jumps over a lazy dog while seven tired wizards quietly count their coins".split()
prompts = [" ".join(words[: 5 + i]) for i in range(6)] + [" ".join(words[i % len(words)] for i in range(long))]
answers = []
for p in prompts:
    r = post("/v1/completions", {"model": model, "prompt": p, "max_tokens": 16, "temperature": 0, "logprobs": 0, "return_tokens_as_token_ids": True})
    answers.append([int(t.split(":", 1)[1]) for t in r["choices"][0]["logprobs"]["tokens"]])
try:
    metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    routed = [l for l in metrics.splitlines() if l.startswith("tandem_frontend_disagg_requests_total{")]
except Exception as e:
    routed = [f"no /metrics: {e}"]
json.dump({"answers": answers, "routed": routed}, open(out, "w"))
print(f"{len(answers)} answers; routed: {routed}")
