"""How the `auto` rule (auto-v2) was chosen, and its leave-one-task-out check.

Reproduces the README's "Should I calibrate?" tables with the bertflow Python
package alone (`scripts/python-env.sh` builds it into .venv):

    .venv/bin/python scripts/reference/auto_rule.py [--data ../shared/data/sts] [--out auto_rule.json]

For each of the 7 fit settings of all-MiniLM-L6-v2 (last-avg, first-last-avg,
cls, emb-avg with mean weighting; last-avg, first-last-avg, emb-avg with uSIF
weights counted on the fit sentences) and each STS task it encodes the task's
fit and eval sentences (embeddings are cached), takes the statistics `auto`
decides from (`bertflow.advise`, labels never read) and scores a family of
`softwhiten` transforms (alpha, shrink, drop, blend) fitted on the fit
sentences.

The rule has three thresholds and two transforms:
  mean pair cosine < T_iso: identity; else mean-vector share in the top-10
  directions >= T_align: the "spectral" transform; else mean pair cosine >=
  T_narrow: the "narrow" transform; else identity.
Thresholds are midpoints of the gaps between the settings that want different
treatments (last-avg: identity at any cosine; first-last-avg: identity;
emb-avg: spectral; cls: narrow), transforms the best of the family on the
matrices routed to each branch. Leave-one-task-out repeats both choices on
six tasks and scores the seventh. Slow: 30 transforms x 49 fit matrices, about
20 minutes on 2 cores with a warm embedding cache.
"""

import argparse
import itertools
import json
import sys

import numpy as np

import bertflow
from bertflow import sts

SETTINGS = [
    ("last-avg", "mean"),
    ("first-last-avg", "mean"),
    ("cls", "mean"),
    ("emb-avg", "mean"),
    ("last-avg", "usif"),
    ("first-last-avg", "usif"),
    ("emb-avg", "usif"),
]
# Which branch each pooling should end in (known from the scores).
WANTS = {"last-avg": "iso", "first-last-avg": "mild", "cls": "narrow", "emb-avg": "spectral"}
IDENTITY = ("none",)


def family():
    """Candidate softwhiten transforms: (alpha, shrink, drop, blend)."""
    out = []
    for drop, alpha, shrink in itertools.product([0, 2, 5], [0.5, 0.8, 1.0], [0, 0.25, 0.5]):
        out.append((alpha, shrink, drop, 0.0))
    for alpha in [0.6, 0.7, 0.8]:
        out.append((alpha, 0.0, 0, 0.5))
    return out


def spec(t):
    if t == IDENTITY:
        return "none"
    a, s, d, b = t
    return f"softwhiten:alpha={a},shrink={s},drop={d},blend={b}"


def score_all(data):
    tasks = sts.tasks(data)
    rows = {}
    for pooling, weighting in SETTINGS:
        for task in tasks:
            fit_s, eval_s = task.fit_sentences(), task.sentences()
            enc = bertflow.Encoder(pooling=pooling, weighting=weighting)
            if weighting != "mean":
                enc.fit_weighting(fit_s)
            f, e = enc.encode(fit_s), enc.encode(eval_s)
            st = bertflow.advise(f)["stats"]
            scores = {spec(IDENTITY): task.evaluate(e, "all").spearman}
            # One pass over the rows; every softwhiten fit starts from these
            # statistics (as SoftWhitening.fit(f) does internally).
            moments = bertflow.MomentStats(f.shape[1]).update(f)
            for t in family():
                c = moments.fit(spec(t))
                scores[spec(t)] = task.evaluate(c.transform(e), "all").spearman
            rows[(pooling, weighting, task.name)] = {
                "cos": st["mean_cosine"],
                "align": st["mean_top10_align"],
                "scores": scores,
            }
            print(pooling, weighting, task.name, "raw %.2f" % scores["none"], file=sys.stderr, flush=True)
    return rows


def thresholds(rows, names):
    sel = lambda want: [r for (p, _, t), r in rows.items() if t in names and WANTS[p] in want]  # noqa: E731
    iso = (max(r["cos"] for r in sel({"iso"})) + min(r["cos"] for r in sel({"mild", "narrow", "spectral"}))) / 2
    align = (max(r["align"] for r in sel({"mild", "narrow"})) + min(r["align"] for r in sel({"spectral"}))) / 2
    narrow = (max(r["cos"] for r in sel({"mild"})) + min(r["cos"] for r in sel({"narrow"}))) / 2
    return iso, align, narrow


def branch(r, th):
    iso, align, narrow = th
    if r["cos"] < iso:
        return None
    if r["align"] >= align:
        return "spectral"
    if r["cos"] >= narrow:
        return "narrow"
    return None


def choose(rows, names, th):
    best = {}
    for b, cands in [("spectral", [t for t in family() if t[3] == 0]), ("narrow", family())]:
        routed = [r for (_, _, t), r in rows.items() if t in names and branch(r, th) == b]
        if routed:
            best[b] = max(cands, key=lambda c: np.mean([r["scores"][spec(c)] for r in routed]))
    return best


def applied(r, th, best):
    b = branch(r, th)
    return r["scores"][spec(best[b]) if b in best else "none"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default="auto_rule.json")
    args = ap.parse_args()
    rows = score_all(args.data)
    names = list(sts.TASKS)
    th = thresholds(rows, names)
    best = choose(rows, names, th)
    report = {"thresholds": th, "transforms": {b: spec(t) for b, t in best.items()}, "settings": {}}
    loto = {}
    for held in names:
        others = [n for n in names if n != held]
        th_o = thresholds(rows, others)
        best_o = choose(rows, others, th_o)
        for (p, w, t), r in rows.items():
            if t == held:
                loto[(p, w, t)] = applied(r, th_o, best_o)
    for p, w in SETTINGS:
        raw = [rows[(p, w, t)]["scores"]["none"] for t in names]
        ins = [applied(rows[(p, w, t)], th, best) for t in names]
        lo = [loto[(p, w, t)] for t in names]
        report["settings"][f"{p}+{w}"] = {
            "raw": np.mean(raw),
            "auto": np.mean(ins),
            "auto_loto": np.mean(lo),
            "worst_task_vs_raw": min(a - b for a, b in zip(ins, raw)),
        }
        print(f"{p:15s} {w:5s} raw {np.mean(raw):.2f}  auto {np.mean(ins):.2f}  LOTO {np.mean(lo):.2f}")
    print("thresholds (iso, align, narrow):", [round(v, 3) for v in th], "transforms:", report["transforms"])
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
