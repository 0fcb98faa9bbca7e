"""Sentence vectors of a sentence-transformers model for the auto rule's
leave-one-model-out check (scripts/reference/auto_rule.py).

With `--engine bertflow` the vectors come from bertflow's own encoder
(`crates/encoder/examples/hidden_states.rs`, fp32; any Python with numpy), else
from transformers in a reference environment with torch (not the project's .venv):

    python3 scripts/reference/model_vectors.py --engine bertflow \
        --model models/all-mpnet-base-v2 --out target/auto-cache/mpnet [--data ../shared/data/sts]
    REFENV/bin/python scripts/reference/model_vectors.py \
        --model models/all-MiniLM-L6-v2 --out target/auto-cache/minilm

(`scripts/fetch_mpnet.sh` installs mpnet.) On MiniLM the two engines agree: the
same token ids, pooled vectors within 3.4e-6, token states within one float16
step. It reads every sentence of the
seven STS tasks (whitespace-normalised as bertflow's loader does), runs the
model once per sentence with `output_hidden_states` (hidden state 0 is the
embedding output, 1..N the layers, as bertflow's poolings count them), and
writes into --out:

* `sentences.json`: the sentences, in row order; `done.npy`: the rows
  written so far (saved every 50 batches, eval sentences first);
* `pooled-{last-avg,first-last-avg,cls,emb-avg}.npy` (float32): masked means
  over all tokens, [CLS]/<s> and [SEP]/</s> included, of hidden state N, of
  the mean of 1 and N, of 0; and the first token of N (`st`, the
  sentence-transformers pipeline, is `last-avg` normalised, made by the reader);
* `tokens.npy` (int32 ids), `offsets.npy` (row i's tokens are
  offsets[i]:offsets[i+1]) and `tok-L{0,1,N}.f16.npy` (float16, tokens x d):
  the token states, for uSIF weights counted per task.

Sentences are sorted by length and batched; with transformers mpnet takes about
30 minutes on 2 idle CPU cores, MiniLM about 4; bertflow is faster.
"""

import argparse
import csv
import glob
import json
import os
import subprocess
import sys

import numpy as np


def norm(s):
    return " ".join(s.split())


def sentences(data):
    """Every scored sentence, eval sentences first (STS12-16, STS-B test, SICK
    test), then those only fitted on (STS-B train and dev, SICK train and
    trial); sorted by text within each group."""
    out, fit_only = [], []
    for f in sorted(glob.glob(os.path.join(data, "STS1[2-6]", "STS.input.*.txt"))):
        gs = f.replace("STS.input.", "STS.gs.")
        with open(f, encoding="utf-8", errors="replace") as fh, open(gs, encoding="utf-8") as gh:
            for line, score in zip(fh, gh):
                fields = line.rstrip("\n").split("\t")
                # Unscored pairs are neither scored nor fitted on.
                if len(fields) >= 2 and score.strip():
                    out += [norm(fields[0]), norm(fields[1])]
    for f in sorted(glob.glob(os.path.join(data, "STSBenchmark", "sts-*.csv"))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.rstrip("\n").split("\t")
                if len(fields) >= 7:
                    (out if f.endswith("test.csv") else fit_only).extend([norm(fields[5]), norm(fields[6])])
    for f in sorted(glob.glob(os.path.join(data, "SICK", "SICK_*.txt"))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            head = next(rows)
            a, b = head.index("sentence_A"), head.index("sentence_B")
            for r in rows:
                if len(r) > max(a, b):
                    (out if "test" in f else fit_only).extend([norm(r[a]), norm(r[b])])
    first = sorted({s for s in out if s})
    seen = set(first)
    return first, sorted({s for s in fit_only if s and s not in seen})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="../shared/data/sts")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--only",
        help="a JSON list of sentences: compute only these rows of an existing --out "
        "(those not written yet; the other rows keep their vectors or stay unwritten)",
    )
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 autocast (about 2x faster on CPUs with AVX512-BF16; scores move by a few hundredths)",
    )
    ap.add_argument(
        "--engine",
        choices=["transformers", "bertflow"],
        default="transformers",
        help="bertflow: run crates/encoder/examples/hidden_states.rs (cargo) on the sentences",
    )
    args = ap.parse_args()
    if args.engine == "bertflow":
        if args.only or args.bf16:
            sys.exit("--only and --bf16 are for --engine transformers")
        os.makedirs(args.out, exist_ok=True)
        first, rest = sentences(args.data)
        with open(os.path.join(args.out, "sentences.json"), "w") as fh:
            json.dump(first + rest, fh)
        with open(os.path.join(args.out, "meta.json"), "w") as fh:
            json.dump({"model": args.model, "engine": "bertflow", "precision": "fp32"}, fh)
        env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
        cmd = ["cargo", "run", "--release", "--locked", "-p", "bertflow-encoder",
               "--example", "hidden_states", "--", args.model, args.out]
        sys.exit(subprocess.call(cmd, env=env))

    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    first, rest = sentences(args.data)
    sents = first + rest
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).eval()
    ids = [tok(s, truncation=True, max_length=384)["input_ids"] for s in sents]
    lens = np.array([len(i) for i in ids])
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    total = int(offsets[-1])
    print(f"{len(sents)} sentences, {total} tokens", file=sys.stderr, flush=True)
    n = model.config.num_hidden_layers
    layers = (0, 1, n)
    d = model.config.hidden_size
    names = ("last-avg", "first-last-avg", "cls", "emb-avg")
    if args.only:
        with open(os.path.join(args.out, "sentences.json")) as fh:
            if json.load(fh) != sents:
                sys.exit(f"{args.out} holds other sentences: run without --only first")
        toks = {l: np.load(os.path.join(args.out, f"tok-L{l}.f16.npy"), mmap_mode="r+") for l in layers}
        pooled = {p: np.load(os.path.join(args.out, f"pooled-{p}.npy")) for p in names}
        written = np.load(os.path.join(args.out, "done.npy"))
        with open(args.only) as fh:
            index = {s: i for i, s in enumerate(sents)}
            want = np.zeros(len(sents), bool)
            want[[index[s] for s in json.load(fh)]] = True
        rows_left = np.flatnonzero(want & ~written)
        order = rows_left[np.argsort(lens[rows_left], kind="stable")]
    else:
        np.save(os.path.join(args.out, "tokens.npy"), np.concatenate([np.array(i, np.int32) for i in ids]))
        np.save(os.path.join(args.out, "offsets.npy"), offsets)
        toks = {
            l: np.lib.format.open_memmap(os.path.join(args.out, f"tok-L{l}.f16.npy"), "w+", np.float16, (total, d))
            for l in layers
        }
        pooled = {p: np.zeros((len(sents), d), np.float32) for p in names}
        # Eval sentences first, each group by length: a run cut short still
        # leaves every eval set complete (done.npy marks the rows written).
        group = np.arange(len(sents)) >= len(first)
        order = np.lexsort((lens, group))
        written = np.zeros(len(sents), bool)
    print(f"{len(order)} sentences to encode", file=sys.stderr, flush=True)
    done = 0

    def save():
        for l in layers:
            toks[l].flush()
        for p, v in pooled.items():
            np.save(os.path.join(args.out, f"pooled-{p}.npy"), v)
        np.save(os.path.join(args.out, "done.npy"), written)

    if not args.only:
        with open(os.path.join(args.out, "sentences.json"), "w") as fh:
            json.dump(sents, fh)
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump({"model": args.model, "bf16": args.bf16, "torch": torch.__version__}, fh)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        for b in range(0, len(order), args.batch):
            rows = order[b : b + args.batch]
            width = int(lens[rows].max())
            inp = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for k, r in enumerate(rows):
                inp[k, : lens[r]] = torch.tensor(ids[r])
                mask[k, : lens[r]] = 1
            hs = model(input_ids=inp, attention_mask=mask, output_hidden_states=True).hidden_states
            hs = [h.float() for h in hs]
            m = mask.unsqueeze(-1).float()
            cnt = m.sum(1)
            mean = lambda h: ((h * m).sum(1) / cnt).numpy()  # noqa: E731
            pooled["last-avg"][rows] = mean(hs[n])
            pooled["first-last-avg"][rows] = mean((hs[1] + hs[n]) / 2)
            pooled["emb-avg"][rows] = mean(hs[0])
            pooled["cls"][rows] = hs[n][:, 0].numpy()
            for l in layers:
                h = hs[l].numpy()
                for k, r in enumerate(rows):
                    toks[l][offsets[r] : offsets[r + 1]] = h[k, : lens[r]].astype(np.float16)
            done += len(rows)
            written[rows] = True
            if (b // args.batch) % 50 == 49:
                save()
                print(f"{done}/{len(sents)}", file=sys.stderr, flush=True)
    save()
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
