"""How the `auto` rule (auto-v4) was chosen, and its leave-one-model-out check.

    python3 scripts/reference/model_vectors.py --engine bertflow --model models/all-MiniLM-L6-v2 --out target/auto-cache/minilm
    python3 scripts/reference/model_vectors.py --engine bertflow --model models/all-mpnet-base-v2 --out target/auto-cache/mpnet
    REFENV/bin/python scripts/reference/auto_rule.py [--cache target/auto-cache] [--data ../shared/data/sts] [--shipped]

(`scripts/fetch_mpnet.sh` installs mpnet; REFENV is any environment with
numpy and scipy. The vectors come from bertflow's own encoder at fp32;
`model_vectors.py` without --engine computes the same cache with
transformers.)

For two fine-tuned models (all-MiniLM-L6-v2, all-mpnet-base-v2), eight fit
settings (poolings last-avg, first-last-avg, cls, the sentence-transformers
pipeline `st` (last-avg, normalised) and emb-avg with mean weighting;
last-avg, first-last-avg, emb-avg with uSIF weights counted on the task's fit
sentences) and the seven STS tasks (per-task target fit, Spearman x100,
`all`), it computes the statistics `auto` decides from (as
bertflow_calib::advise does; labels never read) on each fit matrix and scores
a family of `softwhiten` transforms fitted on it (from one eigendecomposition
per matrix, the formula of bertflow_calib::SoftWhitening; the MiniLM numbers
equal bertflow's: raw 78.87 / 73.69 / 57.93 / 67.15, auto-v2 76.07 / 68.52 /
70.02). It runs in the reference environment (numpy, scipy; no bertflow
needed). all-mpnet-base-v2 is scored on a seeded sample of --mpnet-pairs pairs
per task, fitted on the sample's sentences (0, the default: every pair). Scores are cached in
--cache/scores.json; `--shipped` scores the constants in bertflow_calib::rule.

The rule (auto-v4) has five thresholds and two transforms:
  mean pair cosine < T_iso: identity; else mean-vector share in the top-10
  directions >= T_align and (mean pair cosine >= T_spec or row-norm
  variation >= T_cv): the "spectral" transform; share >= T_align otherwise:
  identity; else mean pair cosine >= T_narrow: the "narrow" transform; else
  identity.
Each threshold is the midpoint of the widest gap, on the fitting model's
matrices, between the settings whose best treatment differs (a setting wants a
branch when that branch's transform raises its 7-task average by at least
0.5 on that model, else identity); transforms are the best of the family on
the matrices routed to each branch. Leave-one-model-out: thresholds and
transforms chosen on one model's 56 matrices, scored on the other's, both
ways. The shipped rule is chosen on both models' 112 matrices.
"""

import argparse
import csv
import glob
import itertools
import json
import os
import sys

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_vectors import norm  # noqa: E402

MODELS = {"minilm": "all-MiniLM-L6-v2", "mpnet": "all-mpnet-base-v2"}
SETTINGS = [
    ("last-avg", "mean"),
    ("first-last-avg", "mean"),
    ("cls", "mean"),
    ("st", "mean"),
    ("emb-avg", "mean"),
    ("last-avg", "usif"),
    ("first-last-avg", "usif"),
    ("emb-avg", "usif"),
]
FINE_TUNED = {"last-avg", "first-last-avg", "cls", "st"}
IDENTITY = "none"
RTOL = 1e-10  # bertflow_calib::ZERO_VARIANCE_RTOL


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
        return IDENTITY
    a, s, d, b = t
    return f"softwhiten:alpha={a},shrink={s},drop={d},blend={b}"


class Vectors:
    """One model's cached vectors (model_vectors.py) and its vocabulary."""

    def __init__(self, cache, model_dir):
        self.dir = cache
        with open(os.path.join(cache, "sentences.json")) as fh:
            self.index = {s: i for i, s in enumerate(json.load(fh))}
        self.pooled = {p: np.load(os.path.join(cache, f"pooled-{p}.npy")) for p in
                       ("last-avg", "first-last-avg", "cls", "emb-avg")}
        done = os.path.join(cache, "done.npy")
        self.done = np.load(done) if os.path.exists(done) else np.ones(len(self.index), bool)
        self.tokens = np.load(os.path.join(cache, "tokens.npy"))
        self.offsets = np.load(os.path.join(cache, "offsets.npy"))
        names = [f for f in os.listdir(cache) if f.startswith("tok-L")]
        self.states = {int(f[5:].split(".")[0]): np.load(os.path.join(cache, f), mmap_mode="r") for f in names}
        self.last = max(self.states)
        with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as fh:
            vocab = [line.rstrip("\n") for line in fh]
        special = {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "<s>", "</s>", "<pad>"}
        self.is_special = np.array([v in special for v in vocab])

        def punct(t):
            t = t[2:] if t.startswith("##") else t
            return bool(t) and all(not c.isalnum() and not c.isspace() for c in t)

        self.zeroed = self.is_special | np.array([punct(v) and v not in special for v in vocab])

    def rows(self, sentences):
        try:
            return np.array([self.index[s] for s in sentences])
        except KeyError as e:
            sys.exit(f"{self.dir}: no vector for {e}; run model_vectors.py again")

    def usif_weights(self, fit_rows):
        """bertflow's uSIF token weights (special and punctuation dropped),
        from the word-piece counts of the fit sentences."""
        toks = np.concatenate([self.tokens[self.offsets[r]:self.offsets[r + 1]] for r in fit_rows])
        counts = np.bincount(toks, minlength=len(self.zeroed)).astype(np.float64)
        p = counts / counts.sum()
        v = np.count_nonzero(p)
        pieces = counts[~self.is_special[: len(counts)]].sum()
        n = pieces / len(fit_rows)
        threshold = 1.0 - (1.0 - 1.0 / v) ** n
        alpha = np.count_nonzero(p > threshold) / v
        a = (1.0 - alpha) / (alpha * 0.5 * v)
        w = a / (0.5 * a + p)
        w[self.zeroed[: len(w)]] = 0.0
        return w

    def embed(self, pooling, rows, weights=None):
        if pooling == "st":
            x = self.pooled["last-avg"][rows]
            return x / np.linalg.norm(x, axis=1, keepdims=True)
        if weights is None:
            return self.pooled[pooling][rows]
        layers = {"last-avg": [self.last], "first-last-avg": [1, self.last], "emb-avg": [0]}[pooling]
        out = np.zeros((len(rows), self.pooled["cls"].shape[1]), np.float32)
        for k, r in enumerate(rows):
            lo, hi = self.offsets[r], self.offsets[r + 1]
            w = weights[self.tokens[lo:hi]]
            if not (w > 0).any():
                w = np.ones_like(w)
            h = sum(np.asarray(self.states[l][lo:hi], np.float32) for l in layers) / len(layers)
            out[k] = (w @ h) / w.sum()
        return out


def eigen(f):
    f = f.astype(np.float64)
    mu = f.mean(0)
    c = (f - mu).T @ (f - mu) / (len(f) - 1)
    s, u = np.linalg.eigh(c)
    s, u = s[::-1], u[:, ::-1]
    rank = int(np.count_nonzero(s > RTOL * s[0]))
    return mu, s[:rank], u[:, :rank]


def transforms(e, eig, cands):
    """softwhiten (bertflow_calib::SoftWhitening) of the rows of e for each
    candidate, from one eigendecomposition of the fit data."""
    mu, s, u = eig
    z = (e.astype(np.float64) - mu) @ u
    for a, sh, drop, b in cands:
        sp = (1 - sh) * s + sh * s.mean()
        f = (sp[drop:] / sp[drop]) ** (-a / 2)
        y = z[:, drop:] * f
        if b > 0:
            y = y @ u[:, drop:].T
            x = e.astype(np.float64)
            y = b * x / np.linalg.norm(x, axis=1, keepdims=True) + (1 - b) * y / np.linalg.norm(y, axis=1, keepdims=True)
        yield (a, sh, drop, b), np.ascontiguousarray(y, np.float32)


def load_tasks(data):
    """The seven tasks as bertflow loads them (`bertflow_eval`): name, scored
    pairs (s1, s2, gold) of the eval set, fit sentences (the task's scored
    sentences; every split of STS-B and SICK-R)."""
    out = []
    for y in ["STS12", "STS13", "STS14", "STS15", "STS16"]:
        pairs = []
        for f in sorted(glob.glob(os.path.join(data, y, "STS.input.*.txt"))):
            gs = f.replace("STS.input.", "STS.gs.")
            with open(f, encoding="utf-8", errors="replace") as fh, open(gs, encoding="utf-8") as gh:
                for line, score in zip(fh, gh):
                    x = line.rstrip("\n").split("\t")
                    if score.strip():
                        pairs.append((norm(x[0]), norm(x[1]), float(score)))
        out.append((y, pairs, pairs))
    for name, pattern, test, cols in [
        ("STS-B", "STSBenchmark/sts-*.csv", "test.csv", None),
        ("SICK-R", "SICK/SICK_*.txt", "test", ("sentence_A", "sentence_B", "relatedness_score")),
    ]:
        every, tests = [], []
        for f in sorted(glob.glob(os.path.join(data, pattern))):
            with open(f, encoding="utf-8", errors="replace") as fh:
                rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                a, b, sc = (5, 6, 4) if cols is None else [h.index(c) for h in [next(rows)] for c in cols]
                for x in rows:
                    if len(x) > max(a, b, sc):
                        p = (norm(x[a]), norm(x[b]), float(x[sc]))
                        every.append(p)
                        if test in os.path.basename(f):
                            tests.append(p)
        out.append((name, tests, every))
    return [(n, pairs, list(dict.fromkeys([p[0] for p in fit] + [p[1] for p in fit]))) for n, pairs, fit in out]


def sample(pairs, n, seed=24):
    """n pairs drawn without replacement (all when n is 0 or too large)."""
    if not n or n >= len(pairs):
        return pairs
    idx = np.sort(np.random.default_rng(seed).choice(len(pairs), n, replace=False))
    return [pairs[i] for i in idx]


def spearman(e, pairs, index):
    """Spearman x100 of the pairs' cosines with the gold scores (`all`: one
    correlation over every pair of the task)."""
    a = np.array([index[p[0]] for p in pairs])
    b = np.array([index[p[1]] for p in pairs])
    x, y = e[a].astype(np.float64), e[b].astype(np.float64)
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    return 100 * spearmanr(cos, [p[2] for p in pairs]).correlation


def auto_stats(f):
    """The statistics bertflow_calib::advise reports that the rule reads,
    plus candidates that were looked at."""
    f64 = f.astype(np.float64)
    m = len(f)
    u = f64 / np.linalg.norm(f64, axis=1, keepdims=True)
    sm = u.sum(0)
    mu, s, vecs = eigen(f)
    p = s / s.sum()
    return {
        "mean_cosine": (sm @ sm - m) / (m * (m - 1)),
        "mean_top10_align": ((vecs[:, :10].T @ mu) ** 2).sum() / (mu @ mu),
        "mean_share": mu @ mu / (f64 * f64).sum(1).mean(),
        "top1_share": p[0],
        "top10_share": p[:10].sum(),
        "eff_rank_ratio": np.exp(-(p * np.log(p)).sum()) / len(s),
        "norm_cv": np.linalg.norm(f64, axis=1).std() / np.linalg.norm(f64, axis=1).mean(),
    }


def score_all(cache, data, samples):
    """Statistics and scores of every (model, setting, task), cached in
    --cache/scores.json."""
    path = os.path.join(cache, "scores.json")
    rows = {}
    if os.path.exists(path):
        with open(path) as fh:
            rows = json.load(fh)
    tasks = load_tasks(data)
    for model, name in MODELS.items():
        vec = None
        for pooling, weighting in SETTINGS:
            for tname, pairs, fit_s in tasks:
                key = f"{model}|{pooling}|{weighting}|{tname}"
                if not os.path.isdir(os.path.join(cache, model)):
                    continue
                if key in rows and "norm_cv" in rows[key]["stats"]:
                    continue
                if vec is None:
                    vec = Vectors(os.path.join(cache, model), os.path.join("models", name))
                if samples.get(model):
                    # A sample of the pairs, fitted on its own sentences.
                    pairs = sample(pairs, samples[model])
                    fit_s = list(dict.fromkeys([p[0] for p in pairs] + [p[1] for p in pairs]))
                ev = list(dict.fromkeys([p[0] for p in pairs] + [p[1] for p in pairs]))
                fit_rows, eval_rows = vec.rows(fit_s), vec.rows(ev)
                if not vec.done[eval_rows].all() or not vec.done[fit_rows].all():
                    print(key, "skipped: vectors not all written yet", file=sys.stderr)
                    continue
                w = vec.usif_weights(fit_rows) if weighting == "usif" else None
                f = vec.embed(pooling, fit_rows, w)
                if key in rows:  # scored before a statistic was added
                    rows[key]["stats"] = auto_stats(f)
                    continue
                e = vec.embed(pooling, eval_rows, w)
                index = {s: i for i, s in enumerate(ev)}
                scores = {IDENTITY: spearman(e, pairs, index)}
                for t, y in transforms(e, eigen(f), family()):
                    scores[spec(t)] = spearman(y, pairs, index)
                rows[key] = {"stats": auto_stats(f), "scores": scores, "pairs": len(pairs), "fit": len(fit_s)}
                print(key, "raw %.2f" % scores[IDENTITY], file=sys.stderr, flush=True)
                with open(path, "w") as fh:
                    json.dump(rows, fh)
    with open(path, "w") as fh:
        json.dump(rows, fh)
    return rows


def setting_of(key):
    model, pooling, weighting, _ = key.split("|")
    return model, pooling, weighting


def wants(rows, keys):
    """What each setting of these rows wants: the branch type of the family
    member with the best 7-task average, when it gains at least GAIN over
    the identity; else identity."""
    by = {}
    for k in keys:
        by.setdefault(setting_of(k), []).append(rows[k]["scores"])
    out = {}
    for s, scores in by.items():
        mean = lambda c: np.mean([sc[spec(c)] for sc in scores])  # noqa: E731
        best = max(family(), key=mean)
        gain = mean(best) - mean(IDENTITY)
        out[s] = "identity" if gain < GAIN else ("narrow" if best[3] > 0 else "spectral")
    return out


GAIN = 0.5
# bertflow_calib::rule of auto-v4 (auto-v3: iso 0.10, cv 0.14).
SHIPPED = {"iso": 0.085, "align": 0.20, "spec": 0.20, "cv": 0.15, "narrow": 0.43}


def above(bad, good):
    """A threshold with every `bad` value below it and as many `good` values
    above it as possible: the midpoint between the largest bad value and the
    next good value above it (inf: none, the branch never fires)."""
    top = max(bad, default=-np.inf)
    nxt = min((g for g in good if g > top), default=None)
    if nxt is None:
        return np.inf
    return (top + nxt) / 2 if top > -np.inf else nxt / 2


def thresholds(rows, keys):
    w = wants(rows, keys)
    stat = lambda k, s: rows[k]["stats"][s]  # noqa: E731
    want = lambda k: w[setting_of(k)]  # noqa: E731
    calib = [k for k in keys if want(k) != "identity"]
    ident = [k for k in keys if want(k) == "identity"]
    # Identity below T_iso: every matrix that wants a transform lies above.
    m = min(stat(k, "mean_cosine") for k in calib) if calib else np.inf
    t_iso = above([stat(k, "mean_cosine") for k in ident if stat(k, "mean_cosine") < m], [m]) if calib else np.inf
    up = [k for k in keys if stat(k, "mean_cosine") >= t_iso]
    spec_k = [k for k in up if want(k) == "spectral"]
    # Spectral: the mean vector along the main axes (share >= T_align) of a
    # cone at least T_spec narrow; every other matrix misses one of the two.
    t_align = above([stat(k, "mean_top10_align") for k in up if want(k) == "narrow"],
                    [stat(k, "mean_top10_align") for k in spec_k])
    bad = [k for k in up if want(k) == "identity" and stat(k, "mean_top10_align") >= t_align]
    t_spec = above([stat(k, "mean_cosine") for k in bad], [stat(k, "mean_cosine") for k in spec_k])
    # ... or, for a wider cone, row norms as uneven as a static average's.
    t_cv = above([stat(k, "norm_cv") for k in bad],
                 [stat(k, "norm_cv") for k in spec_k if stat(k, "mean_cosine") < t_spec])
    rest = [k for k in up if stat(k, "mean_top10_align") < t_align]
    t_narrow = above([stat(k, "mean_cosine") for k in rest if want(k) != "narrow"],
                     [stat(k, "mean_cosine") for k in rest if want(k) == "narrow"])
    return {"iso": t_iso, "align": t_align, "spec": t_spec, "cv": t_cv, "narrow": t_narrow}


def branch(st, th):
    cos, align = st["mean_cosine"], st["mean_top10_align"]
    if cos < th["iso"]:
        return None
    if align >= th["align"]:
        return "spectral" if cos >= th["spec"] or st["norm_cv"] >= th["cv"] else None
    return "narrow" if cos >= th["narrow"] else None


def choose(rows, keys, th):
    best = {}
    for b, cands in [("spectral", [t for t in family() if t[3] == 0]), ("narrow", family())]:
        routed = [rows[k] for k in keys if branch(rows[k]["stats"], th) == b]
        if routed:
            best[b] = max(cands, key=lambda c: np.mean([r["scores"][spec(c)] for r in routed]))
    return best


def applied(r, th, best):
    b = branch(r["stats"], th)
    return r["scores"][spec(best[b]) if b in best else IDENTITY]


def fit_rule(rows, keys):
    th = thresholds(rows, keys)
    return th, choose(rows, keys, th)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data/sts")
    ap.add_argument("--cache", default="target/auto-cache")
    ap.add_argument("--out", default="auto_rule.json")
    ap.add_argument(
        "--mpnet-pairs",
        type=int,
        default=0,
        help="score all-mpnet-base-v2 on this many pairs per task (seeded sample, fitted on "
        "its sentences; 0: every pair, per-task target fit)",
    )
    ap.add_argument("--shipped", action="store_true", help="score the shipped constants instead of the in-sample choice")
    args = ap.parse_args()
    rows = score_all(args.cache, args.data, {"mpnet": args.mpnet_pairs})
    keys = sorted(rows)
    models = sorted({k.split("|")[0] for k in keys})
    rule = fit_rule(rows, keys)
    if args.shipped:
        # The constants in bertflow_calib::rule (rounded from the choice above).
        rule = (SHIPPED, {"spectral": (0.5, 0.25, 2, 0.0), "narrow": (0.7, 0.0, 0, 0.5)})
    v2 = ({"iso": 0.10, "align": 0.20, "spec": -np.inf, "cv": -np.inf, "narrow": 0.43}, rule[1])
    lomo = {m: fit_rule(rows, [k for k in keys if not k.startswith(m + "|")]) for m in models}
    report = {"rule": {"thresholds": rule[0], "transforms": {b: spec(t) for b, t in rule[1].items()}},
              "lomo": {f"chosen without {m}": {"thresholds": r[0], "transforms": {b: spec(t) for b, t in r[1].items()}}
                       for m, r in lomo.items()},
              "wants": {"|".join(s): v for s, v in wants(rows, keys).items()},
              "settings": {}}
    print(json.dumps(report["rule"]), json.dumps(report["lomo"]), sep="\n")
    print(f"{'model':7s} {'pooling':15s} {'weight':5s} {'raw':>6s} {'auto':>6s} {'LOMO':>6s} {'worst':>6s} {'worstL':>6s}  branches")
    for m in models:
        for p, w in SETTINGS:
            ks = [k for k in keys if k.startswith(f"{m}|{p}|{w}|")]
            if not ks:
                continue
            raw = [rows[k]["scores"][IDENTITY] for k in ks]
            ins = [applied(rows[k], *rule) for k in ks]
            lo = [applied(rows[k], *lomo[m]) for k in ks]
            br = "".join((branch(rows[k]["stats"], rule[0]) or "-")[0] for k in ks)
            brl = "".join((branch(rows[k]["stats"], lomo[m][0]) or "-")[0] for k in ks)
            d = {"tasks": len(ks), "raw": np.mean(raw), "auto": np.mean(ins), "auto_lomo": np.mean(lo),
                 "auto_v2": np.mean([applied(rows[k], *v2) for k in ks]),
                 "worst_task_vs_raw": min(a - b for a, b in zip(ins, raw)),
                 "worst_task_vs_raw_lomo": min(a - b for a, b in zip(lo, raw)),
                 "branches": br, "branches_lomo": brl,
                 "stats": {k.split("|")[3]: {s: round(rows[k]["stats"][s], 4) for s in ("mean_cosine", "mean_top10_align")}
                           for k in ks}}
            report["settings"][f"{m}|{p}|{w}"] = d
            print(f"{m:7s} {p:15s} {w:5s} {d['raw']:6.2f} {d['auto']:6.2f} {d['auto_lomo']:6.2f} "
                  f"{d['worst_task_vs_raw']:6.2f} {d['worst_task_vs_raw_lomo']:6.2f}  {br} {brl}")
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
