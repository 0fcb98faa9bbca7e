#!/usr/bin/env python3
"""The quantized-index benchmark's Python side (scripts/bench_index.sh runs it).

  bench_index.py synth --real R.npy --real-texts R.txt --n N --out X.npy --texts T.txt
      N vectors: Gaussian with the mean and covariance fitted on R (all-MiniLM-L6-v2
      embeddings of STS sentences), the rows of R mixed in at evenly spaced places
      (so that real queries have real neighbours); T.txt names each row.
  bench_index.py peers --vectors X.npy --queries Q.npy --k 10 --rescore 1,2,5,10,20
      faiss IndexBinaryFlat (sign bits) + exact rescoring, and faiss
      IndexScalarQuantizer (8 bit) flat, at 1 and 2 threads; faiss IndexHNSWFlat and
      IndexHNSWSQ (8 bit), M 32, built on every core, searched at each --hnsw-ef
      (--hnsw 0 skips them); usearch HNSW over
      i8 vectors (cosine) and over sign bits (b1, Hamming) + exact rescoring
      (--usearch 0 skips them): recall@k against exact fp32, p50/p99 latency per
      single query, and the index's memory.
"""
import argparse
import time

import numpy as np


def blocks(a, lo0, hi0):
    """Rows [lo0, hi0) of the N-row synthetic corpus, in blocks of at most 200k:
    (lo, float32 rows, names). One generator per 200k block, seeded by its
    position, so any chunking gives the same rows."""
    real = np.load(a.real).astype(np.float64)
    texts = open(a.real_texts, encoding="utf8").read().split("\n")[: len(real)]
    mean = real.mean(0)
    cov = np.cov(real, rowvar=False) + 1e-6 * np.eye(real.shape[1])
    chol = np.linalg.cholesky(cov)
    n, d = a.n, real.shape[1]
    every = max(1, n // len(real))
    real_at = {i * every: j for j, i in enumerate(range(len(real))) if i * every < n}
    chunk = 200_000
    for lo in range(lo0, hi0, chunk):
        hi = min(hi0, lo + chunk)
        rng = np.random.default_rng([a.seed, lo])
        x = mean + rng.standard_normal((hi - lo, d)) @ chol.T
        names = [f"synthetic {i}" for i in range(lo, hi)]
        for i in range(lo, hi):
            j = real_at.get(i)
            if j is not None:
                x[i - lo] = real[j]
                names[i - lo] = texts[j].replace("\n", " ")
        yield lo, x.astype(np.float32), names


def synth(a):
    """Rows [lo, hi) of an N-row synthetic corpus (all N when --lo/--hi are not given):
    chunk by chunk, so a 10M-row corpus never has to exist as one file."""
    lo0, hi0 = a.lo, (a.hi or a.n)
    d = np.load(a.real, mmap_mode="r").shape[1]
    out = np.lib.format.open_memmap(a.out, mode="w+", dtype=np.float32, shape=(hi0 - lo0, d))
    mixed = 0
    with open(a.texts, "w", encoding="utf8") as t:
        for lo, x, names in blocks(a, lo0, hi0):
            out[lo - lo0 : lo - lo0 + len(x)] = x
            mixed += sum(not s.startswith("synthetic ") for s in names)
            t.write("\n".join(names) + "\n")
    out.flush()
    print(f"wrote rows {lo0}..{hi0} of {a.n} x {d} to {a.out} ({mixed} real rows mixed in)")


def truth(a):
    """The exact top k (cosine) of each query over the whole N-row corpus, made
    again block by block (one pass, matrix products): one line of ids per query."""
    q = unit(np.load(a.queries).astype(np.float32))[: a.queries_n]
    best_s = np.full((len(q), a.k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), a.k), dtype=np.int64)
    for lo, x, _ in blocks(a, 0, a.n):
        s = q @ unit(x).T
        top = np.argpartition(-s, a.k, axis=1)[:, : a.k]
        cs = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        ci = np.concatenate([best_i, top + lo], axis=1)
        keep = np.argsort(-cs, axis=1, kind="stable")[:, : a.k]
        best_s, best_i = np.take_along_axis(cs, keep, 1), np.take_along_axis(ci, keep, 1)
    with open(a.out, "w") as f:
        for row in best_i:
            f.write(" ".join(map(str, row)) + "\n")
    print(f"wrote the exact top {a.k} of {len(q)} queries over {a.n} rows to {a.out}")


def unit(x):
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-12)


def timed(fn, queries, warm=False):
    """Each query alone, timed; with `warm`, the whole set run once untimed first."""
    if warm:
        for q in queries:
            fn(q[None, :])
    ms, out = [], []
    for q in queries:
        t = time.perf_counter()
        out.append(fn(q[None, :]))
        ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    return out, ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def peers(a):
    import faiss

    x = unit(np.load(a.vectors, mmap_mode="r")[: a.limit or None].astype(np.float32))
    q = unit(np.load(a.queries).astype(np.float32))[: a.queries_n]
    k = a.k
    truth = []
    for lo in range(0, len(q), 100):
        s = q[lo : lo + 100] @ x.T
        top = np.argpartition(-s, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(s, top, 1), axis=1, kind="stable")
        truth.extend(np.take_along_axis(top, order, 1))
    recall = lambda got: np.mean([len(set(g) & set(t)) / k for g, t in zip(got, truth)])
    if a.hnsw_only:
        faiss_hnsw_peers(a, x, q, k, recall)
        return
    bits = np.packbits(x > 0, axis=1)
    for threads in [int(t) for t in a.faiss_threads.split(",") if t]:
        faiss.omp_set_num_threads(threads)
        b = faiss.IndexBinaryFlat(x.shape[1])
        b.add(bits)
        for r in [int(v) for v in a.rescore.split(",")]:
            def search(qq, r=r):
                _, cand = b.search(np.packbits(qq > 0, axis=1), k * r)
                c = cand[0]
                return c[np.argsort(-(x[c] @ qq[0]))[:k]]
            got, p50, p99 = timed(search, q, a.warm)
            print(f"faiss IndexBinaryFlat+rescore threads={threads} rescore={r}: recall@{k} {recall(got):.4f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, codes {bits.nbytes / 2**20:.0f} MiB")
        sq = faiss.IndexScalarQuantizer(x.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
        sq.train(x[:65536])
        sq.add(x)
        got, p50, p99 = timed(lambda qq: sq.search(qq, k)[1][0], q, a.warm)
        print(f"faiss IndexScalarQuantizer(8bit) flat threads={threads}: recall@{k} {recall(got):.4f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, codes {x.shape[0] * x.shape[1] / 2**20:.0f} MiB")
        del sq, b
    if a.hnsw:
        faiss_hnsw_peers(a, x, q, k, recall)
    if a.usearch:
        usearch_peers(a, x, q, k, recall, bits)


def faiss_hnsw_peers(a, x, q, k, recall):
    """faiss IndexHNSWFlat (f32) and IndexHNSWSQ (8 bit) with inner product, M
    --hnsw-m, efConstruction --ef-construction, built on every core, searched
    at 1 thread at each --hnsw-ef; memory: the index's own (vectors or codes,
    and the links)."""
    import faiss

    d = x.shape[1]
    import os

    for name in [n for n in ("IndexHNSWFlat", "IndexHNSWSQ") if n in a.hnsw_kinds.split(",")]:
        faiss.omp_set_num_threads(a.threads)
        # --hnsw-cache DIR: a graph built by an earlier run (with its build time) is read
        # back instead of built again (the build and the queries may then run apart).
        kept = a.hnsw_cache and os.path.join(a.hnsw_cache, f"{name}-m{a.hnsw_m}-efc{a.ef_construction}-n{len(x)}")
        if kept and os.path.exists(kept + ".faiss"):
            h = faiss.read_index(kept + ".faiss")  # already of its own class
            build = float(open(kept + ".seconds").read())
            print(f"faiss {name}: read from {kept}.faiss (built by an earlier run)", flush=True)
        else:
            t = time.perf_counter()
            if name == "IndexHNSWFlat":
                h = faiss.IndexHNSWFlat(d, a.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            else:
                h = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_8bit, a.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                h.train(x[:65536])
            h.hnsw.efConstruction = a.ef_construction
            h.add(x)
            build = time.perf_counter() - t
            if kept:
                faiss.write_index(h, kept + ".faiss")
                open(kept + ".seconds", "w").write(f"{build}\n")
        storage = faiss.downcast_index(h.storage)
        links = h.hnsw.neighbors.size() * 4 + h.hnsw.offsets.size() * 8 + h.hnsw.levels.size() * 4
        mem = (storage.code_size * storage.ntotal + links) / 2**20
        print(f"faiss {name} M={a.hnsw_m} efConstruction={a.ef_construction}: built {len(x)} in {build:.0f} s on {a.threads} threads, index memory {mem:.0f} MiB (links {links / 2**20:.0f} MiB)", flush=True)
        faiss.omp_set_num_threads(1)
        for ef in [int(v) for v in a.hnsw_ef.split(",")]:
            h.hnsw.efSearch = ef
            got, p50, p99 = timed(lambda qq: h.search(qq, k)[1][0], q, a.warm)
            print(f"faiss {name} threads=1 efSearch={ef}: recall@{k} {recall(got):.4f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, index {mem:.0f} MiB", flush=True)
        del h


def usearch_peers(a, x, q, k, recall, bits):
    """usearch HNSW (connectivity 16, expansion_add 128, built on every core):
    i8 vectors with cosine, searched at several expansion_search; b1 sign bits
    with Hamming, the best k x rescore rescored exactly on the float vectors."""
    from usearch.index import Index as UIndex

    keys = np.arange(len(x), dtype=np.uint64)
    efs = [int(v) for v in a.ef.split(",")]
    for dtype in ("i8", "b1"):
        t = time.perf_counter()
        if dtype == "i8":
            u = UIndex(ndim=x.shape[1], metric="cos", dtype="i8", connectivity=16, expansion_add=128)
            u.add(keys, x, threads=a.threads)
        else:
            u = UIndex(ndim=x.shape[1], metric="hamming", dtype="b1", connectivity=16, expansion_add=128)
            u.add(keys, bits, threads=a.threads)
        build = time.perf_counter() - t
        mem = u.memory_usage / 2**20
        print(f"usearch {dtype} HNSW: built {len(x)} in {build:.0f} s on {a.threads} threads, index memory {mem:.0f} MiB", flush=True)
        for ef in efs:
            u.expansion_search = ef
            if dtype == "i8":
                got, p50, p99 = timed(lambda qq: u.search(qq[0], k, threads=1).keys, q)
                print(f"usearch i8 HNSW ef={ef}: recall@{k} {recall(got):.4f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, index {mem:.0f} MiB", flush=True)
                continue
            for r in [int(v) for v in a.rescore.split(",")]:
                if k * r > ef:
                    continue  # HNSW returns at most expansion_search candidates

                def search(qq, r=r):
                    c = u.search(np.packbits(qq[0] > 0), k * r, threads=1).keys.astype(np.int64)
                    return c[np.argsort(-(x[c] @ qq[0]))[:k]]

                got, p50, p99 = timed(search, q)
                print(f"usearch b1 HNSW+rescore ef={ef} rescore={r}: recall@{k} {recall(got):.4f}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, index {mem:.0f} MiB", flush=True)
        del u


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synth")
    s.add_argument("--real", required=True)
    s.add_argument("--real-texts", required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--texts", required=True)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--lo", type=int, default=0, help="first row of this chunk")
    s.add_argument("--hi", type=int, default=0, help="end of this chunk (default: N)")
    s = sub.add_parser("truth")
    s.add_argument("--real", required=True)
    s.add_argument("--real-texts", required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--queries", required=True)
    s.add_argument("--queries-n", type=int, default=1000)
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--out", required=True)
    s = sub.add_parser("peers")
    s.add_argument("--vectors", required=True)
    s.add_argument("--queries", required=True)
    s.add_argument("--queries-n", type=int, default=200)
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--rescore", default="1,2,5,10,20")
    s.add_argument("--usearch", type=int, default=1, help="0: no usearch peers")
    s.add_argument("--faiss-threads", default="1,2", help="faiss thread counts (empty: no faiss)")
    s.add_argument("--ef", default="16,32,64,128,256,512", help="usearch expansion_search values")
    s.add_argument("--threads", type=int, default=2, help="threads building the usearch and faiss graphs")
    s.add_argument("--hnsw", type=int, default=1, help="0: no faiss HNSW peers")
    s.add_argument("--hnsw-m", type=int, default=32, help="M of the faiss HNSW peers")
    s.add_argument("--ef-construction", type=int, default=40, help="efConstruction of the faiss HNSW peers (faiss's default)")
    s.add_argument("--hnsw-ef", default="16,32,64,128,256", help="efSearch values of the faiss HNSW peers")
    s.add_argument("--hnsw-kinds", default="IndexHNSWFlat,IndexHNSWSQ", help="which faiss HNSW peers")
    s.add_argument("--hnsw-cache", default="", help="directory keeping the faiss HNSW graphs built (reused when there)")
    s.add_argument("--hnsw-only", type=int, default=0, help="1: the faiss HNSW peers only (no flat ones)")
    s.add_argument("--warm", type=int, default=0, help="1: run each query set once untimed first")
    a = p.parse_args()
    {"synth": synth, "truth": truth, "peers": peers}[a.cmd](a)


if __name__ == "__main__":
    main()
