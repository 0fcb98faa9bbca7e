#!/usr/bin/env python3
"""sentence-transformers (PyTorch, CPU) encoding throughput on the unique sentences of
STS-B test: the reference for `bertflow bench encode` (see scripts/bench.sh and
benchmarks/encode.md).

    python scripts/reference/st_encode_bench.py [--model models/all-MiniLM-L6-v2]
        [--data ../shared/data/sts] [--threads 1,2] [--batch-size 32] [--repeat 3] [--json]

Sentences: columns 6 and 7 (0-based 5 and 6) of STSBenchmark/sts-test.csv, split on
tabs, whitespace-normalised (trimmed, runs of whitespace to one space) and
deduplicated in order of first appearance, exactly as bertflow loads them: 2,551
sentences (2,552 distinct raw strings; "A  man is dancing." with two spaces is the
extra one). For each thread count: torch.set_num_threads(t), one untimed warm-up
pass, then `--repeat` timed passes of model.encode(batch_size=32); prints best and
median sentences/s.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

EXPECTED_UNIQUE = 2551


def load_sentences(data_dir):
    path = os.path.join(data_dir, "STSBenchmark", "sts-test.csv")
    seen = set()
    out = []
    raw = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").rstrip("\r").split("\t")
            if len(fields) < 7:
                continue
            for s in fields[5:7]:
                raw.add(s)
                s = " ".join(s.split())
                if s not in seen:
                    seen.add(s)
                    out.append(s)
    return out, len(raw)


def default_data_dir():
    env = os.environ.get("BERTFLOW_DATA")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data", "sts"))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    texts, raw = load_sentences(a.data)
    if len(texts) != EXPECTED_UNIQUE:
        print(
            f"warning: {len(texts)} unique sentences ({raw} raw strings), expected {EXPECTED_UNIQUE}",
            file=sys.stderr,
        )
    model = SentenceTransformer(os.path.normpath(a.model), device="cpu")
    model.eval()
    results = []
    if not a.json:
        print(
            f"st_encode_bench: {os.path.normpath(a.model)}, {len(texts)} unique STS-B test sentences "
            f"({raw} raw strings), batch {a.batch_size}, torch {torch.__version__}, "
            f"sentence-transformers {__import__('sentence_transformers').__version__}, "
            f"{os.cpu_count()} cores ({platform.processor() or platform.machine()})"
        )
    for t in [int(s) for s in a.threads.split(",") if s.strip()]:
        torch.set_num_threads(t)
        with torch.inference_mode():
            model.encode(texts, batch_size=a.batch_size, convert_to_numpy=True)  # warm-up
            secs = []
            for _ in range(a.repeat):
                start = time.perf_counter()
                model.encode(texts, batch_size=a.batch_size, convert_to_numpy=True)
                secs.append(time.perf_counter() - start)
        n = len(texts)
        best, median = min(secs), statistics.median(secs)
        results.append(
            {
                "threads": t,
                "seconds": secs,
                "best_sentences_per_s": n / best,
                "median_sentences_per_s": n / median,
            }
        )
        if not a.json:
            print(
                f"threads {t}: best {n / best:.1f} sentences/s, median {n / median:.1f} sentences/s "
                f"({len(secs)} runs: {', '.join(f'{s:.3f}' for s in secs)} s)"
            )
    if a.json:
        print(
            json.dumps(
                {
                    "bench": "st_encode",
                    "model": os.path.normpath(a.model),
                    "sentences": len(texts),
                    "batch_size": a.batch_size,
                    "repeat": a.repeat,
                    "torch": torch.__version__,
                    "results": results,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
