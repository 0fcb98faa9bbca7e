#!/usr/bin/env python3
"""Summary of the encode part of scripts/bench.sh: bertflow fp32/int8 vs ONNX Runtime
fp32/int8, OpenVINO f32 (when measured) and sentence-transformers, per round (interleaved) and as medians.

    python scripts/reference/encode_summary.py OUT_DIR

Ratios are taken within a round (both sides measured minutes apart), best of
--repeat passes on each side; the last column block gives the median over rounds.
"""
import glob
import json
import os
import statistics
import sys


def best(path, key):
    """{(precision, threads): best sentences/s} from one JSON result file."""
    d = json.load(open(path))
    return {(r.get("precision", key), r["threads"]): r for r in d["results"]}, d


def main():
    out = sys.argv[1]
    rounds = sorted(
        int(p.rsplit("_r", 1)[1].split(".")[0]) for p in glob.glob(f"{out}/encode_bertflow_r*.json")
    )
    if rounds:
        rows = {}  # label -> threads -> [per-round best]
        ratios = {}  # label -> threads -> [per-round ratio]
        info = None
        for r in rounds:
            bf, info = best(f"{out}/encode_bertflow_r{r}.json", "fp32")
            ort = {p: best(f"{out}/encode_ort_{p}_r{r}.json", p)[0] for p in ("fp32", "int8")}
            st = best(f"{out}/encode_torch_r{r}.json", "torch")[0]
            ov_path = f"{out}/encode_ov_fp32_r{r}.json"
            ov = best(ov_path, "fp32")[0] if os.path.exists(ov_path) else {}
            for t in (1, 2):
                def v(res, k):
                    x = res.get(k)
                    return x["best_sentences_per_s"] if x else None
                vals = {
                    "bertflow fp32": v(bf, ("fp32", t)),
                    "bertflow int8": v(bf, ("int8", t)),
                    "ORT fp32": v(ort["fp32"], ("fp32", t)),
                    "ORT int8": v(ort["int8"], ("int8", t)),
                    "OpenVINO f32": v(ov, ("fp32", t)),
                    "sentence-transformers": v(st, ("torch", t)),
                }
                for k, x in vals.items():
                    rows.setdefault(k, {}).setdefault(t, []).append(x)
                for name, a, b in (
                    ("bertflow fp32 / ORT fp32", "bertflow fp32", "ORT fp32"),
                    ("bertflow int8 / ORT int8", "bertflow int8", "ORT int8"),
                    ("bertflow fp32 / OpenVINO f32", "bertflow fp32", "OpenVINO f32"),
                    ("bertflow int8 / ORT fp32", "bertflow int8", "ORT fp32"),
                    ("bertflow fp32 / sentence-transformers", "bertflow fp32", "sentence-transformers"),
                ):
                    if vals[a] and vals[b]:
                        ratios.setdefault(name, {}).setdefault(t, []).append(vals[a] / vals[b])
        print(
            f"Encoding {info['sentences']} unique STS-B test sentences ({info['model']}, batch "
            f"{info['batch_size']}, batches of one token length), sentences/s, best of "
            f"{info['repeat']} per round; {len(rounds)} interleaved rounds; cpu: {info['cpu']}"
        )
        print(f"{'':<40} {'1 thread (per round; median)':>36} {'2 threads (per round; median)':>36}")
        for k, by_t in list(rows.items()):
            cells = []
            for t in (1, 2):
                xs = [x for x in by_t.get(t, []) if x]
                cells.append(
                    f"{' '.join(f'{x:.0f}' for x in xs)}; {statistics.median(xs):.1f}" if xs else "-"
                )
            print(f"{k:<40} {cells[0]:>36} {cells[1]:>36}")
        for k, by_t in ratios.items():
            cells = []
            for t in (1, 2):
                xs = by_t.get(t, [])
                cells.append(
                    f"{' '.join(f'{x:.2f}' for x in xs)}; {statistics.median(xs):.2f}x" if xs else "-"
                )
            print(f"{k:<40} {cells[0]:>36} {cells[1]:>36}")
    if os.path.exists(f"{out}/latency_bertflow.json"):
        bf, _ = best(f"{out}/latency_bertflow.json", "fp32")
        print("\nLatency, one sentence at a time (batch 1, 1 thread), ms p50 / p99:")
        for p in ("fp32", "int8"):
            o = best(f"{out}/latency_ort_{p}.json", p)[0].get((p, 1))
            b = bf.get((p, 1))
            if o and b:
                print(
                    f"  {p}: bertflow {b['p50_ms']:.2f} / {b['p99_ms']:.2f}, ONNX Runtime "
                    f"{o['p50_ms']:.2f} / {o['p99_ms']:.2f}; p50 ratio (ORT / bertflow) "
                    f"{o['p50_ms'] / b['p50_ms']:.2f}x"
                )
    if os.path.exists(f"{out}/stream_bertflow.json"):
        bf, d = best(f"{out}/stream_bertflow.json", "fp32")
        print(f"\nStream: {d['sentences']} STS-B test sentences in file order, padded batches of "
              f"{d['batch_size']}, sentences/s best:")
        for p in ("fp32", "int8"):
            o = best(f"{out}/stream_ort_{p}.json", p)[0]
            for t in (1, 2):
                b, x = bf.get((p, t)), o.get((p, t))
                if b and x:
                    print(
                        f"  {p}, {t} thread{'s' if t > 1 else ''}: bertflow "
                        f"{b['best_sentences_per_s']:.1f}, ONNX Runtime {x['best_sentences_per_s']:.1f}, "
                        f"ratio {b['best_sentences_per_s'] / x['best_sentences_per_s']:.2f}x"
                    )


if __name__ == "__main__":
    main()
