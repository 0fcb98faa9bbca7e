#!/usr/bin/env python3
"""ONNX Runtime or OpenVINO (CPU) encoding throughput and latency on STS-B test:
the peers of `bertflow bench encode` (scripts/bench.sh, benchmarks/encode.md). Run
scripts/reference/ort_export.py first.

    python scripts/reference/ort_encode_bench.py [--onnx target/ort/model_fp32.onnx]
        [--runtime ort|openvino] [--model models/all-MiniLM-L6-v2]
        [--data ../shared/data/sts] [--threads 1,2] [--batch-size 32] [--repeat 3]
        [--mode sorted|stream|latency] [--json]

Runtimes, each for every thread count t:

* ort: ONNX Runtime's CPU provider, SessionOptions.intra_op_num_threads = t,
  inter_op_num_threads = 1, sequential execution, all graph optimisations.
* openvino: OpenVINO's CPU plugin reading the same ONNX file (`Core.read_model`),
  compiled with INFERENCE_PRECISION_HINT f32 (no bf16 or fp16 downcast on CPUs that
  have them), INFERENCE_NUM_THREADS t, PERFORMANCE_HINT LATENCY, one synchronous
  infer request (dynamic batch and sequence axes, as exported).

Modes:

* sorted: the 2,551 unique STS-B test sentences (whitespace-normalised, deduplicated
  in order of first appearance, as bertflow loads them), tokenised with the model's
  tokenizer.json (no padding, no truncation below 512), sorted longest first and cut
  into batches of at most --batch-size sentences of one token length, exactly as
  bertflow batches them, so nothing is padded. Mean pooling of last_hidden_state.
  Tokenisation and pooling are inside the timed region, as in bertflow.
* stream: every sentence of STS-B test in file order (sentence 1 and 2 of each pair,
  not deduplicated, not sorted), consecutive batches of --batch-size, padded to the
  longest in the batch with an attention mask; masked mean pooling.
* latency: the 2,551 unique sentences one at a time (batch 1); p50 and p99 of the
  per-sentence wall time over all --repeat passes.

Prints best and median sentences/s over --repeat timed passes after one warm-up.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_encode_bench import EXPECTED_UNIQUE, default_data_dir, load_sentences  # noqa: E402


def stream_sentences(data_dir):
    path = os.path.join(data_dir, "STSBenchmark", "sts-test.csv")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").rstrip("\r").split("\t")
            if len(fields) < 7:
                continue
            out.extend(" ".join(s.split()) for s in fields[5:7])
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", default=os.path.join(root, "target", "ort", "model_fp32.onnx"))
    ap.add_argument("--model", default=os.path.join(root, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mode", choices=("sorted", "stream", "latency"), default="sorted")
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--runtime", choices=("ort", "openvino"), default="ort")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np
    from tokenizers import Tokenizer

    if a.runtime == "ort":
        import onnxruntime as ort

        version = ort.__version__

        def session(t):
            so = ort.SessionOptions()
            so.intra_op_num_threads = t
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            return ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
    else:
        import openvino as ov

        version = ov.__version__

        class OvSession:
            """ONNX Runtime's `run(None, feeds)[0]` on an OpenVINO infer request."""

            def __init__(self, t):
                core = ov.Core()
                self.compiled = core.compile_model(
                    core.read_model(a.onnx),
                    "CPU",
                    {
                        "INFERENCE_PRECISION_HINT": "f32",
                        "INFERENCE_NUM_THREADS": t,
                        "PERFORMANCE_HINT": "LATENCY",
                    },
                )
                self.req = self.compiled.create_infer_request()
                self.out = self.compiled.output(0)

            def run(self, _names, feeds):
                return [self.req.infer(feeds)[self.out]]

        def session(t):
            return OvSession(t)

    import onnx

    # token_type_ids only where the exported model takes them (not MPNet, RoBERTa).
    with_types = "token_type_ids" in {i.name for i in onnx.load(a.onnx, load_external_data=False).graph.input}

    def feeds(x, mask):
        f = {"input_ids": x, "attention_mask": mask}
        if with_types:
            f["token_type_ids"] = np.zeros_like(x)
        return f

    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    if a.mode == "stream":
        texts = stream_sentences(a.data)
    else:
        texts, raw = load_sentences(a.data)
        if len(texts) != EXPECTED_UNIQUE:
            print(f"warning: {len(texts)} unique sentences, expected {EXPECTED_UNIQUE}", file=sys.stderr)

    def tokenize(batch_texts):
        ids = [e.ids for e in tok.encode_batch(batch_texts)]
        return [v if len(v) <= a.max_len else v[: a.max_len - 1] + v[-1:] for v in ids]

    def run_sorted(sess):
        ids = tokenize(texts)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.empty((len(ids), 0), dtype=np.float32)
        rows = [None] * len(ids)
        start = 0
        while start < len(order):
            L = len(ids[order[start]])
            end = start
            while end < len(order) and end - start < a.batch_size and len(ids[order[end]]) == L:
                end += 1
            batch = order[start:end]
            x = np.array([ids[i] for i in batch], dtype=np.int64)
            h = sess.run(None, feeds(x, np.ones_like(x)))[0]
            m = h.mean(axis=1)
            for k, i in enumerate(batch):
                rows[i] = m[k]
            start = end
        return np.stack(rows) if rows else out

    def run_stream(sess):
        outs = []
        for s in range(0, len(texts), a.batch_size):
            ids = tokenize(texts[s : s + a.batch_size])
            t = max(len(v) for v in ids)
            x = np.zeros((len(ids), t), dtype=np.int64)
            mask = np.zeros_like(x)
            for k, v in enumerate(ids):
                x[k, : len(v)] = v
                mask[k, : len(v)] = 1
            h = sess.run(None, feeds(x, mask))[0]
            mf = mask[..., None].astype(np.float32)
            outs.append((h * mf).sum(axis=1) / mf.sum(axis=1))
        return np.concatenate(outs)

    def run_latency(sess, lat):
        for s in texts:
            t0 = time.perf_counter()
            x = np.array([tokenize([s])[0]], dtype=np.int64)
            h = sess.run(None, feeds(x, np.ones_like(x)))[0]
            h.mean(axis=1)
            lat.append(time.perf_counter() - t0)

    results = []
    for t in [int(s) for s in a.threads.split(",") if s.strip()]:
        sess = session(t)
        secs, lat = [], []
        for r in range(a.repeat + 1):
            start = time.perf_counter()
            if a.mode == "sorted":
                run_sorted(sess)
            elif a.mode == "stream":
                run_stream(sess)
            else:
                run_latency(sess, lat if r > 0 else [])
            if r > 0:
                secs.append(time.perf_counter() - start)
        n = len(texts)
        best, median = min(secs), statistics.median(secs)
        prec = "int8" if "int8" in os.path.basename(a.onnx) else "fp32"
        res = {"precision": prec, "threads": t, "seconds": secs, "best_sentences_per_s": n / best,
               "median_sentences_per_s": n / median, "load_average_before": os.getloadavg()[0]}
        if lat:
            lat.sort()
            res["p50_ms"] = 1e3 * lat[len(lat) // 2]
            res["p99_ms"] = 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        results.append(res)
        if not a.json:
            extra = f", p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms" if lat else ""
            print(f"threads {t}: best {n / best:.1f} sentences/s, median {n / median:.1f} sentences/s"
                  f" ({', '.join(f'{s:.3f}' for s in secs)} s){extra}")
    if a.json:
        print(json.dumps({"bench": "ort_encode" if a.runtime == "ort" else "openvino_encode",
                          "runtime": a.runtime, "onnx": os.path.basename(a.onnx), "mode": a.mode,
                          "sentences": len(texts), "batch_size": a.batch_size, "repeat": a.repeat,
                          "onnxruntime" if a.runtime == "ort" else "openvino": version,
                          "results": [dict(r, precision="int8" if "int8" in os.path.basename(a.onnx) else "fp32") for r in results]}, indent=2))


if __name__ == "__main__":
    main()
