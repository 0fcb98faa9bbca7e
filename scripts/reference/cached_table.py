"""The seven-task table (Spearman x100, `all`, per-task target fit) of cached
sentence vectors, scored by bertflow's own evaluation (`bertflow.sts.evaluate`)
for several poolings and calibrators.

    .venv/bin/python scripts/reference/cached_table.py --cache target/auto-cache/mpnet \
        [--poolings st,last-avg,cls] [--calibrators none,auto,whiten,flow] [--json out.json]

The cache is the layout `scripts/reference/model_vectors.py` writes
(`sentences.json`, `pooled-<pooling>.npy`); `st` is `last-avg` normalised to
unit length (the sentence-transformers pipeline of all-MiniLM-L6-v2 and
all-mpnet-base-v2: mean pooling, then Normalize). Encoding once and looking
the vectors up keeps a 110M-parameter model's table to one pass over the
sentences on a 2-core machine.
"""

import argparse
import json
import os
import sys

import numpy as np

import bertflow


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--data", default=os.environ.get("BERTFLOW_DATA", "../shared/data/sts"))
    ap.add_argument("--poolings", default="st,last-avg,cls")
    ap.add_argument("--calibrators", default="none,auto,whiten,flow")
    ap.add_argument("--json")
    args = ap.parse_args()
    with open(os.path.join(args.cache, "sentences.json")) as fh:
        index = {s: i for i, s in enumerate(json.load(fh))}
    done = np.load(os.path.join(args.cache, "done.npy"))
    results = {}
    for pooling in args.poolings.split(","):
        source = "last-avg" if pooling == "st" else pooling
        m = np.load(os.path.join(args.cache, f"pooled-{source}.npy"))
        if pooling == "st":
            m = m / np.linalg.norm(m, axis=1, keepdims=True)

        def embed(sentences, m=m):
            rows = [index[" ".join(s.split())] for s in sentences]
            if not done[rows].all():
                sys.exit(f"{args.cache}: vectors missing; run model_vectors.py again")
            return np.ascontiguousarray(m[rows], dtype=np.float32)

        for cal in args.calibrators.split(","):
            r = bertflow.sts.evaluate(embed, data=args.data, calibrate=None if cal == "none" else cal)
            row = {t: v["spearman"] for t, v in r["tasks"].items()}
            row["avg"] = r["average"]["spearman"]
            results[f"{pooling}|{cal}"] = row
            print(pooling, cal, " ".join(f"{v:6.2f}" for v in row.values()), flush=True)
    names = list(next(iter(results.values())))
    print("| pooling | calibrator | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for key, row in results.items():
        p, c = key.split("|")
        print(f"| {p} | {c} | " + " | ".join(f"{v:.2f}" for v in row.values()) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
