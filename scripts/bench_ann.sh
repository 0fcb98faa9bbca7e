#!/usr/bin/env bash
# The 1M graph benchmark of benchmarks/index-ann.md (issue 33; not in CI): on the
# N-row quantized index and the vectors that scripts/bench_index.sh makes (run it
# first with N=1000000 CODES=int8 (or binary:itq=true) QUERY=0 KEEP=1 PEERS=0, and
# `bench_index.py synth` for x.npy), one thread, warm cache (each query set run once
# untimed first), recall@10 over the 1,000 STS queries (alternating rounds of the
# graph and faiss's: scripts/bench_ann_rounds.py):
#   1. bertflow's flat scan of the codes: the defaults, and shortlist 16 rescore 5;
#   2. bertflow's graph over the codes (M, EFC; see the ann step), at each EF
#      and ANN_RESCORE;
#   3. faiss IndexHNSWFlat and IndexHNSWSQ (M 32), and the flat peers
#      (IndexBinaryFlat + rescoring, IndexScalarQuantizer), usearch off.
#
#   WORK=target/bench-ann scripts/bench_ann.sh
#
# Environment: WORK, N (1000000), M (16), EFC (100), EF (a list), ANN_RESCORE (a list),
# STEPS (which of scan, ann, peers to run), PY (python with numpy and faiss),
# BUILD_THREADS (threads building bertflow's graph in the ann step, 2),
# FAISS_BUILD_THREADS (threads building the faiss graphs, 2), HNSW_EF, PEER_RESCORE.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-$PWD/target/bench-ann}
N=${N:-1000000}
M=${M:-16}
EFC=${EFC:-100}
EF=${EF:-32,64,128,256,512}
ANN_RESCORE=${ANN_RESCORE:-5,10,20}
STEPS=${STEPS:-"scan ann peers"}
PY=${PY:-/work/wt/venv-ref/bin/python}
BENCH=${BENCH:-target/release/examples/index_bench}
idx="$WORK/x.idx"
truth="$WORK/truth-n$N-q1000.txt"
lscpu | grep -E "Model name|^CPU\(s\)|^Flags" | cut -c1-200
for step in $STEPS; do
  case $step in
    scan)
      echo "== bertflow flat scan, 1 thread"
      "$BENCH" query --index "$idx" --query-npy "$WORK/queries.npy" --truth "$truth" \
        --exact-queries 1000 --rescore 50,5 --shortlist 16 --threads 1 --warm --no-ann
      ;;
    ann)
      # The graph: by default a CompactAnn built in the measuring process on
      # BUILD_THREADS threads; HNSW_RS=1: the graph stored next to the index (built
      # and saved by `index_bench ann`, as `bertflow index ann` does, if absent).
      echo "== bertflow --ann over the codes, 1 thread"
      if [ "${HNSW_RS:-0}" = 1 ]; then
        [ -s "$idx.hnsw.json" ] || /usr/bin/time -f "graph build: %e s wall, peak RSS %M KiB" \
          "$BENCH" ann --index "$idx" --m "$M" --ef-construction "$EFC"
        "$BENCH" query --index "$idx" --query-npy "$WORK/queries.npy" --truth "$truth" \
          --exact-queries 1000 --ann --compact --ef "$EF" --ann-rescore "$ANN_RESCORE" --warm
      else
        "$BENCH" query --index "$idx" --query-npy "$WORK/queries.npy" --truth "$truth" \
          --exact-queries 1000 --ann --compact-build --m "$M" --ef-construction "$EFC" \
          --build-threads "${BUILD_THREADS:-2}" --ef "$EF" --ann-rescore "$ANN_RESCORE" --warm
      fi
      ;;
    peers)
      echo "== faiss peers, queries at 1 thread"
      "$PY" scripts/bench_index.py peers --vectors "$WORK/x.npy" --queries "$WORK/queries.npy" \
        --queries-n 1000 --rescore "${PEER_RESCORE:-5,10,20,50}" --usearch 0 --faiss-threads 1 \
        --threads "${FAISS_BUILD_THREADS:-2}" --warm 1 --hnsw-ef "${HNSW_EF:-16,32,64,128,256,512}" --hnsw-cache "$WORK" \
        --hnsw-only "${HNSW_ONLY:-0}"
      ;;
  esac
done
