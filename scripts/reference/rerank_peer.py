"""A MiniLM-L6-size cross-encoder (all-MiniLM-L6-v2's encoder under a random
BertForSequenceClassification head, one label) against transformers: logits
and pairs per second. Not in CI (needs PyTorch and the model directory).

    /work/wt/venv-ref/bin/python scripts/reference/rerank_peer.py make DIR   # model + transformers' logits
    .venv/bin/python scripts/reference/rerank_peer.py check DIR              # bertflow's logits vs those
    /work/wt/venv-ref/bin/python scripts/reference/rerank_peer.py bench DIR torch
    .venv/bin/python scripts/reference/rerank_peer.py bench DIR bertflow

`make` writes DIR/model (config, safetensors, tokenizer) and DIR/golden.json:
five pairs, two cut at 512 tokens (longest_first). `bench` times the first
1000 STS-B test pairs (best of 3 after a warm-up) on 2 threads, fp32:
transformers in length-sorted padded batches of 32, bertflow.Reranker.predict.
"""
import json
import os
import sys
import time

SRC = os.environ.get("BERTFLOW_MODEL", "models/all-MiniLM-L6-v2")
STSB = os.path.join(os.environ.get("BERTFLOW_DATA", "../shared/data/sts"), "STSBenchmark", "sts-test.csv")
LONG = " ".join(["A man is playing a guitar on the street while the crowd is listening to the music."] * 60)
PAIRS = [("what is a panda?", "The giant panda is a bear species endemic to China."),
         ("what is a panda?", "hi"),
         ("A man plays guitar.", LONG),
         (LONG, LONG + " extra words at the end"),
         ("Héllo wörld, ünïcode ok? 日本語も。", "Stocks fell sharply on Monday.")]


def make(out):
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification
    torch.manual_seed(0)
    m = BertForSequenceClassification.from_pretrained(SRC, num_labels=1).eval()
    with torch.no_grad():
        m.classifier.weight.normal_(0, 0.5)
        m.bert.pooler.dense.weight.normal_(0, 0.1)
    m.save_pretrained(os.path.join(out, "model"))
    tok = AutoTokenizer.from_pretrained(SRC)
    tok.save_pretrained(os.path.join(out, "model"))
    res = []
    for q, t in PAIRS:
        enc = tok(q, t, truncation=True, max_length=512, return_tensors="pt")
        with torch.no_grad():
            res.append({"pair": [q, t], "tokens": enc["input_ids"].shape[1], "logits": m(**enc).logits[0].tolist()})
    json.dump(res, open(os.path.join(out, "golden.json"), "w"))


def check(out):
    import numpy as np
    import bertflow
    g = json.load(open(os.path.join(out, "golden.json")))
    rr = bertflow.Reranker(os.path.join(out, "model"))
    got = rr.predict([tuple(c["pair"]) for c in g])
    want = np.array([c["logits"] for c in g], np.float32)
    print("max |bertflow - transformers| =", float(np.abs(got - want).max()), "on logits up to", float(np.abs(want).max()))


def bench(out, which):
    pairs = []
    for line in open(STSB, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 7:
            pairs.append((f[5], f[6]))
    pairs = pairs[:1000]
    model = os.path.join(out, "model")
    if which == "torch":
        import torch
        from transformers import AutoTokenizer, BertForSequenceClassification
        torch.set_num_threads(2)
        tok = AutoTokenizer.from_pretrained(model)
        m = BertForSequenceClassification.from_pretrained(model).eval()
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))

        def run():
            with torch.inference_mode():
                for s in range(0, len(order), 32):
                    b = [pairs[i] for i in order[s:s + 32]]
                    enc = tok([a for a, _ in b], [c for _, c in b], padding=True, truncation=True,
                              return_tensors="pt")
                    m(**enc)
    else:
        import bertflow
        rr = bertflow.Reranker(model, threads=2)

        def run():
            rr.predict(pairs)
    run()
    best = min(timed(run) for _ in range(3))
    print(which, f"{len(pairs) / best:.0f} pairs/s")


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


if __name__ == "__main__":
    cmd, out = sys.argv[1], sys.argv[2]
    {"make": lambda: make(out), "check": lambda: check(out),
     "bench": lambda: bench(out, sys.argv[3])}[cmd]()
