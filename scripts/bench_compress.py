#!/usr/bin/env python3
"""Compact embeddings against peers at equal bytes per vector (issue 32).

Protocol: every distinct sentence of the seven STS tasks (26,126) encoded
once by bertflow (all-MiniLM-L6-v2, `last-avg` unless --pooling), 1,000
query sentences drawn with a seed, their true 10 neighbours by exact cosine
at full width (the query itself excluded). Each method is fitted once on
all the vectors (labels unused), then scored by recall@10 (neighbours by the
method's own similarity of codes: cosine of the reconstructed or integer
vectors, Hamming distance for bits) and by the STS 7-task Spearman (x100,
aggregate `all`, average of the seven) of the same similarities. Codes/s:
rows turned into codes per second from the float vectors (fit excluded).

Peers (the reference environment, /work/wt/venv-ref, on sys.path after this
interpreter's own packages): sentence-transformers' quantize_embeddings
(binary; int8 with the corpus as calibration embeddings), faiss-cpu (PCA,
ITQ + LSH, SQ8, PQ, OPQ + PQ) and plain truncation. CPU: `lscpu`'s model
name is recorded in the output.

Run with the project's .venv (bertflow installed):
    .venv/bin/python scripts/bench_compress.py --out benchmarks/compress.json
"""

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

import bertflow


# Bytes per vector of the product-quantizer rows (bertflow pq:m=M with OPQ,
# faiss OPQM,PQM and PQM).
PQ_BYTES = (64, 48, 32, 16)


def ref_path(venv):
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if not site:
        sys.exit(f"no reference environment at {venv}")
    sys.path.append(site[0])


def unit(m):
    m = np.asarray(m, dtype=np.float32)
    n = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.maximum(n, 1e-12)


def pm1(packed):
    """+-1 vectors of packed bits (any bit order: dot = d - 2 Hamming)."""
    return np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=1).astype(np.float32) * 2 - 1


def recall_at_10(R, queries, truth):
    """R: vectors whose cosine is the method's similarity."""
    U = unit(R)
    hits = 0
    for s in range(0, len(queries), 250):
        q = queries[s:s + 250]
        S = U[q] @ U.T
        S[np.arange(len(q)), q] = -np.inf
        top = np.argpartition(-S, 10, axis=1)[:, :10]
        hits += sum(len(set(a) & set(b)) for a, b in zip(top, truth[s:s + 250]))
    return hits / (10 * len(queries))


def sts(R, tasks, index):
    out = []
    for t in tasks:
        rows = [index[s] for s in t.sentences()]
        out.append(t.evaluate(np.ascontiguousarray(R[rows], dtype=np.float32), "all").spearman)
    return float(np.mean(out)), [round(v, 2) for v in out]


def timed(f):
    t = time.perf_counter()
    y = f()
    return y, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--pooling", default="last-avg")
    ap.add_argument("--data", default=None)
    ap.add_argument("--ref-venv", default=os.environ.get("BERTFLOW_REF_VENV", "/work/wt/venv-ref"))
    ap.add_argument("--work", default="target/bench_compress", help="folder for the cached vectors")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--pq-only", action="store_true", help="only fp32 and the product-quantizer rows")
    ap.add_argument("--bits-only", action="store_true",
                    help="only fp32 and the bit rows (sentence-transformers' row only where it is installed)")
    ap.add_argument("--pq-bytes", default=",".join(map(str, PQ_BYTES)),
                    help="bytes per vector of the product-quantizer rows (comma-separated)")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="print the markdown table of earlier runs' --out files instead of running")
    a = ap.parse_args()
    if a.table:
        for path in a.table:
            table(path)
        return
    ref_path(a.ref_venv)
    import faiss
    try:
        from sentence_transformers.quantization import quantize_embeddings
    except ImportError:
        if not a.bits_only:
            raise
        quantize_embeddings = None

    # One thread: faiss's OpenMP threads spin while they wait, which on a
    # shared machine makes k-means crawl; every method runs on one core.
    faiss.omp_set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    tasks = bertflow.sts.tasks(a.data)
    corpus, index = [], {}
    for t in tasks:
        for s in t.sentences():
            if s not in index:
                index[s] = len(corpus)
                corpus.append(s)
    enc = bertflow.Encoder(a.model, pooling=a.pooling)
    os.makedirs(a.work, exist_ok=True)
    cached = os.path.join(a.work, f"{os.path.basename(enc.model.rstrip('/'))}-{a.pooling}-{len(corpus)}.npy")
    if os.path.exists(cached):
        X = np.load(cached)
        enc_s = None
    else:
        X, enc_s = timed(lambda: np.asarray(enc.encode(corpus), dtype=np.float32))
        np.save(cached, X)
    n, d = X.shape
    rng = np.random.default_rng(a.seed)
    queries = rng.choice(n, size=a.queries, replace=False)
    U = unit(X)
    S = U[queries] @ U.T
    S[np.arange(len(queries)), queries] = -np.inf
    truth = np.argpartition(-S, 10, axis=1)[:, :10]
    del S

    rows = []

    def add(budget, method, who, R, fit_s, code_s):
        r10 = recall_at_10(R, queries, truth)
        avg, per = sts(R, tasks, index)
        rows.append({"bytes": budget, "method": method, "by": who, "recall@10": round(r10, 3),
                     "sts": round(avg, 2), "sts_tasks": per, "fit_s": round(fit_s, 2),
                     "codes_per_s": round(n / code_s) if code_s else None})
        print(f"{budget:5d} B  {who:10s} {method:48s} recall@10 {r10:.3f}  STS {avg:.2f}", flush=True)

    # --- float32, full width and cut ------------------------------------
    add(4 * d, f"fp32, {d} dims", "-", X, 0.0, None)
    for k in () if a.pq_only or a.bits_only else (128, 64):
        add(4 * k, f"first {k} dims", "truncation", X[:, :k], 0.0, None)
        pca, fs = timed(lambda: bertflow.Pca(k=k).fit(X))
        Y, cs = timed(lambda: pca.transform(X))
        add(4 * k, f"pca:k={k} (uncentred axes, a rotation)", "bertflow", Y, fs, cs)
        pc, fs = timed(lambda: bertflow.Pca(k=k, centre="true").fit(X))
        add(4 * k, f"pca:k={k},centre=true", "bertflow", pc.transform(X), fs, None)
        f = faiss.PCAMatrix(d, k)
        _, fs = timed(lambda: f.train(X))
        Y, cs = timed(lambda: f.apply(X))
        add(4 * k, f"PCAMatrix {k} (centred)", "faiss", Y, fs, cs)

    if a.bits_only:
        bits(X, d, add, faiss, quantize_embeddings)
    elif not a.pq_only:
        ints(X, d, add, faiss, quantize_embeddings)
        bits(X, d, add, faiss, quantize_embeddings)
    # --- product quantizers: one byte per sub-vector -------------------
    for m in () if a.bits_only else (int(v) for v in a.pq_bytes.split(",")):
        if d % m:
            continue
        c, fs = timed(lambda: bertflow.Pca().fit(X, quantize=f"pq:m={m}"))
        C, cs = timed(lambda: c.transform(X, quantize=True))
        add(m, f"pca + pq:m={m} (OPQ rotation, reconstructed)", "bertflow",
            c.quantizer_.inverse_transform(C), fs, cs)
        for f in (f"OPQ{m},PQ{m}", f"PQ{m}"):
            pq = faiss.index_factory(d, f)
            _, fs = timed(lambda: pq.train(X))
            codes, cs = timed(lambda: pq.sa_encode(X))
            add(m, f"{f}x8 (reconstructed)", "faiss", pq.sa_decode(codes), fs, cs)

    cpu = next((l.split(":", 1)[1].strip() for l in os.popen("lscpu") if l.startswith("Model name")), None)
    result = {"cpu": cpu, "model": enc.model, "pooling": a.pooling, "sentences": n, "queries": len(queries),
              "seed": a.seed, "encode_s": enc_s, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def table(path):
    """The markdown rows of one run, and per budget bertflow's best recall@10
    against the best peer's (the issue's goal: no peer more than 0.005 above)."""
    r = json.load(open(path))
    print(f"{r['model']} `{r['pooling']}`, {r['sentences']:,} sentences, {r['queries']:,} queries, CPU {r['cpu']}\n")
    print("| bytes | by | method | recall@10 | STS 7-task | fit s | codes/s |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for row in r["rows"]:
        cps = f"{row['codes_per_s']:,.0f}" if row["codes_per_s"] else "-"
        fit = f"{row['fit_s']:.1f}" if row["fit_s"] else "-"
        print(f"| {row['bytes']:,} | {row['by']} | {row['method']} | {row['recall@10']:.3f} | {row['sts']:.2f} | {fit} | {cps} |")
    print("\n| bytes | bertflow best | best peer | peer - bertflow |")
    print("|---:|---|---|---:|")
    for b in sorted({row["bytes"] for row in r["rows"]}, reverse=True):
        best = lambda rows: max(rows, key=lambda x: x["recall@10"], default=None)
        ours = best([x for x in r["rows"] if x["bytes"] == b and x["by"] == "bertflow"])
        peer = best([x for x in r["rows"] if x["bytes"] == b and x["by"] not in ("bertflow", "-")])
        if ours and peer:
            print(f"| {b:,} | {ours['method']} {ours['recall@10']:.3f} | {peer['by']} {peer['method']} "
                  f"{peer['recall@10']:.3f} | {peer['recall@10'] - ours['recall@10']:+.3f} |")
    print()


def ints(X, d, add, faiss, quantize_embeddings):
    """The int8 and int8-after-rotation rows."""
    # --- int8, one byte per dimension ------------------------------------
    q, fs = timed(lambda: bertflow.Quantizer("int8").fit(X))
    C, cs = timed(lambda: q.transform(X))
    add(d, "int8, one scale, codes as integers", "bertflow", C.astype(np.float32), fs, cs)
    q, fs = timed(lambda: bertflow.Quantizer("int8", ranges="dim").fit(X))
    C, cs = timed(lambda: q.transform(X))
    add(d, "int8:ranges=dim, scored with its scales", "bertflow", q.inverse_transform(C), fs, cs)
    C, cs = timed(lambda: quantize_embeddings(X, precision="int8", calibration_embeddings=X))
    add(d, "quantize_embeddings int8 (corpus ranges), codes as integers", "ST", C.astype(np.float32), 0.0, cs)
    sq = faiss.index_factory(d, "SQ8")
    _, fs = timed(lambda: sq.train(X))
    codes, cs = timed(lambda: sq.sa_encode(X))
    add(d, "SQ8 (reconstructed)", "faiss", sq.sa_decode(codes), fs, cs)

    # --- int8 after the rotation: fewer dims, one byte each --------------
    for k in (256, 128, 64):
        c, fs = timed(lambda: bertflow.Pca(k=k).fit(X, quantize="int8"))
        C, cs = timed(lambda: c.transform(X, quantize=True))
        add(k, f"pca:k={k} + int8", "bertflow", C.astype(np.float32), fs, cs)
    pq = faiss.index_factory(d, "PQ128x4")
    _, fs = timed(lambda: pq.train(X))
    codes, cs = timed(lambda: pq.sa_encode(X))
    add(64, "PQ128x4 (reconstructed)", "faiss", pq.sa_decode(codes), fs, cs)


def bits(X, d, add, faiss, quantize_embeddings):
    """The bit rows: signs, ITQ (bertflow's and faiss's), at d and 128 bits."""
    if quantize_embeddings is not None:
        C, cs = timed(lambda: quantize_embeddings(X, precision="ubinary"))
        add(d // 8, "quantize_embeddings binary (signs)", "ST", pm1(C), 0.0, cs)
    for spec in ("binary", "binary:itq=true"):
        c, fs = timed(lambda: bertflow.Pca().fit(X, quantize=spec))
        C, cs = timed(lambda: c.transform(X, quantize=True))
        add(d // 8, f"pca + {spec}", "bertflow", pm1(C.view(np.uint8) ^ 0x80), fs, cs)
    for k in (d, 128):
        f = faiss.index_factory(d, f"ITQ{k},LSH")
        _, fs = timed(lambda: f.train(X))
        codes, cs = timed(lambda: f.sa_encode(X))
        add(k // 8, f"ITQ{k},LSH (PCA + ITQ)", "faiss", pm1(codes), fs, cs)
    c, fs = timed(lambda: bertflow.Pca(k=128).fit(X, quantize="binary:itq=true"))
    C, cs = timed(lambda: c.transform(X, quantize=True))
    add(16, "pca:k=128 + binary:itq=true", "bertflow", pm1(C.view(np.uint8) ^ 0x80), fs, cs)


if __name__ == "__main__":
    main()
