"""Reference token-mean vectors of all-mpnet-base-v2 on STS-B test sentences,
for the encoder's slow test `mpnet_last_avg_equals_transformers_on_stsb`
(crates/encoder/tests/it/real_mpnet.rs). Not committed (about 2 MB): run it once
in a reference environment with torch, transformers and sentence-transformers
(not the project's .venv), after scripts/fetch_mpnet.sh:

    REFENV/bin/python scripts/reference/mpnet_stsb_reference.py \
        [--model models/all-mpnet-base-v2] [--data ../shared/data/sts] [--n 300] \
        [--out models/reference/all-mpnet-base-v2-stsb-last-avg.json]

The sentences are the first --n unique sentences of STS-B test in order of
first appearance, whitespace-normalised (as the Rust test reads them). Each
vector is the masked mean over all tokens (<s> and </s> included) of the last
hidden state of transformers' MPNetModel, one padded batch of 32 at a time;
the script checks that sentence-transformers' Transformer + Pooling modules
(without Normalize) give the same vectors within 1e-5 before writing.
"""
import argparse
import json
import os

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer


def stsb_test(data, n):
    seen, out = set(), []
    with open(os.path.join(data, "STSBenchmark", "sts-test.csv"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 7:
                continue
            for s in fields[5:7]:
                s = " ".join(s.split())
                if s not in seen:
                    seen.add(s)
                    out.append(s)
    return out[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/all-mpnet-base-v2")
    ap.add_argument("--data", default=os.environ.get("BERTFLOW_DATA", "../shared/data/sts"))
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--out", default="models/reference/all-mpnet-base-v2-stsb-last-avg.json")
    a = ap.parse_args()
    texts = stsb_test(a.data, a.n)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModel.from_pretrained(a.model).eval()
    vecs = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            enc = tok(texts[i : i + 32], padding=True, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            vecs.append(((h * m).sum(1) / m.sum(1)).numpy())
    vecs = np.concatenate(vecs)
    st = SentenceTransformer(a.model, device="cpu")
    plain = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
    sv = plain.encode(texts, batch_size=32, convert_to_numpy=True)
    diff = float(np.abs(sv - vecs).max())
    print(f"{len(texts)} sentences; transformers vs sentence-transformers max abs diff {diff:.2e}")
    assert diff < 1e-5, diff
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".partial", "w") as f:
        json.dump({"model": os.path.basename(os.path.normpath(a.model)), "texts": texts,
                   "last_avg": [[float(x) for x in v] for v in vecs]}, f)
    os.replace(a.out + ".partial", a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
