"""Independent reference STS scores for every bertflow pooling, with PyTorch transformers.

    python scripts/reference/sts_reference.py models/all-MiniLM-L6-v2 ../shared/data/sts > out.json

Own loaders (no bertflow code), each sentence encoded with Hugging Face
transformers (output_hidden_states=True), poolings as bertflow documents them,
Spearman x100 with scipy, STS12-16 aggregated "all" (subsets concatenated).
"""
import glob
import json
import os
import sys

import numpy as np
import torch
from scipy.stats import spearmanr
from transformers import AutoModel, AutoTokenizer


def sts_year(d):
    pairs = []
    for inp in sorted(glob.glob(os.path.join(d, "STS.input.*.txt"))):
        gs = inp.replace("STS.input.", "STS.gs.")
        a = open(inp, encoding="utf8").read().split("\n")
        g = open(gs, encoding="utf8").read().split("\n")
        for line, score in zip(a, g):
            if score.strip() == "":
                continue
            cols = line.split("\t")
            pairs.append((cols[0], cols[1], float(score)))
    return pairs


def stsb(d):
    out = []
    for line in open(os.path.join(d, "STSBenchmark", "sts-test.csv"), encoding="utf8").read().splitlines():
        c = line.split("\t")
        out.append((c[5], c[6], float(c[4])))
    return out


def sick(d):
    lines = open(os.path.join(d, "SICK", "SICK_test_annotated.txt"), encoding="utf8").read().splitlines()[1:]
    return [(c[1], c[2], float(c[3])) for c in (l.split("\t") for l in lines if l.strip())]


def main():
    model_dir, data = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    tasks = {f"STS{y}": sts_year(os.path.join(data, f"STS{y}")) for y in (12, 13, 14, 15, 16)}
    tasks["STS-B"] = stsb(data)
    tasks["SICK-R"] = sick(data)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    n = model.config.num_hidden_layers
    pools = {
        "cls": None, "pooler": None, "last-avg": [n], "first-last-avg": [1, n],
        "emb-last-avg": [0, n], "last2-avg": [n - 1, n], "emb-avg": [0],
    }
    sents = sorted({s for p in tasks.values() for a, b, _ in p for s in (a, b)})
    vec = {k: {} for k in pools}
    bs = 64
    sents.sort(key=len)
    for i in range(0, len(sents), bs):
        batch = sents[i:i + bs]
        enc = tok(batch, padding=True, truncation=True, max_length=512, return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, output_hidden_states=True)
        m = enc["attention_mask"].unsqueeze(-1).float()
        for k, layers in pools.items():
            if k == "cls":
                v = out.hidden_states[n][:, 0]
            elif k == "pooler":
                v = out.pooler_output
            else:
                h = torch.stack([out.hidden_states[l] for l in layers]).mean(0)
                v = (h * m).sum(1) / m.sum(1)
            for s, row in zip(batch, v.numpy()):
                vec[k][s] = row
        print(f"{i + len(batch)}/{len(sents)}", file=sys.stderr)
    res = {}
    for k in pools:
        res[k] = {}
        for t, pairs in tasks.items():
            a = np.stack([vec[k][p[0]] for p in pairs]).astype(np.float64)
            b = np.stack([vec[k][p[1]] for p in pairs]).astype(np.float64)
            cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            res[k][t] = round(100 * spearmanr(cos, [p[2] for p in pairs]).correlation, 2)
        res[k]["avg"] = round(float(np.mean([res[k][t] for t in tasks])), 2)
    json.dump({"pairs": {t: len(p) for t, p in tasks.items()}, "spearman": res}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
