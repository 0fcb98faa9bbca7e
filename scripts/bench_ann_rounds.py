"""Rounds of the 1M graph comparison (benchmarks/index-ann.md; not in CI): bertflow's
graph over the int8 codes (index_bench query --ann, a separate process) and faiss's
IndexHNSWSQ and IndexHNSWFlat (read from bench_ann.sh's --hnsw-cache), one after the
other, ROUNDS times, each query alone on one thread after a warm pass; recall@10
against the truth file. Latencies on a shared machine drift by minutes: alternating
the systems and taking the median of the rounds' p50s compares them fairly.

  python scripts/bench_ann_rounds.py WORK BENCH [ROUNDS] [EFS]
"""
import re
import statistics
import subprocess
import sys
import time

import faiss
import numpy as np

work, bench = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
efs = [int(e) for e in (sys.argv[4] if len(sys.argv) > 4 else "112,128").split(",")]
truth_file = f"{work}/truth-n1000000-q1000.txt"
q = np.load(f"{work}/queries.npy").astype(np.float32)
q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
truth = [list(map(int, l.split())) for l in open(truth_file)][: len(q)]
faiss.omp_set_num_threads(1)
peers = {n: faiss.read_index(f"{work}/{n}-m32-efc40-n1000000.faiss") for n in ("IndexHNSWSQ", "IndexHNSWFlat")}
p50s = {}
for r in range(rounds):
    out = subprocess.run(
        [bench, "query", "--index", f"{work}/x.idx", "--query-npy", f"{work}/queries.npy", "--truth", truth_file,
         "--exact-queries", str(len(q)), "--ann", "--ef", ",".join(map(str, efs)), "--ann-rescore", "2", "--warm"],
        capture_output=True, text=True, check=True).stdout
    for m in re.finditer(r"ef=(\d+) rescore=2: recall@10 ([0-9.]+) .*?p50 ([0-9.]+) ms, p99 ([0-9.]+) ms", out):
        key = f"bertflow int8 graph ef={m[1]} rescore=2 recall@10 {m[2]}"
        p50s.setdefault(key, []).append((float(m[3]), float(m[4])))
    for name, h in peers.items():
        for ef in efs:
            h.hnsw.efSearch = ef
            for qq in q:
                h.search(qq[None, :], 10)
            ms, got = [], []
            for qq in q:
                t = time.perf_counter()
                got.append(h.search(qq[None, :], 10)[1][0])
                ms.append((time.perf_counter() - t) * 1e3)
            ms.sort()
            rec = np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth)])
            key = f"faiss {name} efSearch={ef} recall@10 {rec:.4f}"
            p50s.setdefault(key, []).append((ms[len(ms) // 2], ms[int(len(ms) * 0.99)]))
    print(f"round {r + 1} done", flush=True)
for key, v in p50s.items():
    a = [x[0] for x in v]
    b = [x[1] for x in v]
    print(f"{key}: p50 median {statistics.median(a):.3f} ms (rounds: {' '.join(f'{x:.3f}' for x in a)}), p99 median {statistics.median(b):.3f} ms")
