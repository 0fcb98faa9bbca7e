#!/usr/bin/env bash
# The quantized-index benchmark (issue 33; not in CI): N synthetic vectors drawn from
# a Gaussian with all-MiniLM-L6-v2's fitted mean and covariance (on STS sentences),
# real STS sentences mixed in, real STS queries. For each code (binary:itq=true,
# int8): `bertflow index build --vectors --quantize` (time, peak memory, file size),
# then index_bench query (recall@10 against exact fp32, p50/p99 at 1 and 2 threads,
# resident memory while searching). Then faiss peers on the same vectors.
#
#   N=1000000 scripts/bench_index.sh
#   N=10000000 CODES=binary:itq=true PEERS=0 scripts/bench_index.sh   (about 17 GB free needed)
#
# Environment: N (rows), REAL (real STS rows mixed in: all, or a count), QN (queries, 1000),
# QN_INT8 (queries for int8 codes, default QN), CHUNK (rows made and indexed at a time, 1000000), RESCORE
# (candidates per result, a list), THREADS (a list), CODES, KEEP=1 (keep the index),
# QUERY=0 (build and keep the index, no queries),
# WORK (scratch directory), PY (python with numpy and faiss: /work/wt/venv-ref), VPY
# (python with bertflow: .venv), PEERS=0 (no faiss; peers run only for N <= 1000000),
# PEER_RESCORE (the peers' rescoring depths), USEARCH=0 (no usearch peers), FAISS_THREADS
# (a list; empty: no faiss), SHORTLIST
# (bertflow's shortlists, a list).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}
REAL=${REAL:-all}
QN=${QN:-1000}
CHUNK=${CHUNK:-1000000}
RESCORE=${RESCORE:-1,2,5,10,20,50}
THREADS=${THREADS:-1,2}
WORK=${WORK:-$PWD/target/bench-index}
PY=${PY:-/work/wt/venv-ref/bin/python}
CODES=${CODES:-"binary:itq=true int8"}
DATA=${BERTFLOW_DATA:-/work/shared/data/sts}
export BERTFLOW_MODEL=${BERTFLOW_MODEL:-$PWD/models/all-MiniLM-L6-v2} BERTFLOW_TUNE=0
# B and BENCH: the binaries (built here unless given: a copy keeps a long run
# independent of later builds).
B=${B:-target/release/bertflow}
BENCH=${BENCH:-target/release/examples/index_bench}
mkdir -p "$WORK"
# The index (vectors, codes, texts) plus one chunk of vectors, with a margin.
need=$(( (N * 384 * 4 * 11 / 10 + CHUNK * 384 * 4 * 21 / 20) / 1000000000 + 1 ))
free=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
if (( free < need )); then
  echo "only ${free} GB free in $WORK, ${need} GB needed for N=$N: run a smaller N" >&2
  exit 1
fi
if [ "$B" = target/release/bertflow ]; then
  cargo build --release --offline --bins >/dev/null
  cargo build --release --offline -p bertflow-index --example index_bench >/dev/null
fi
lscpu | grep -E "Model name|^CPU\(s\)"
echo "N=$N REAL=$REAL QN=$QN"

# STS sentences: every distinct sentence of the seven STS tasks (26,126); QN of them,
# drawn with seed 0, are the queries; the others (REAL of them, all by default) are
# the real rows mixed into the synthetic corpus.
# Made once per WORK (delete queries.txt to make them again with other REAL or QN).
VPY=${VPY:-.venv/bin/python}
[ -s "$WORK/queries.txt" ] && [ -s "$WORK/real.txt" ] || "$VPY" - "$DATA" "$WORK" "$REAL" "$QN" <<'PY'
import sys
import numpy as np
import bertflow
data, work, real, qn = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen, corpus = set(), []
for t in bertflow.sts.tasks(data):
    for s in t.sentences():
        s = " ".join(s.split())
        if s and s not in seen:
            seen.add(s); corpus.append(s)
pick = set(np.random.default_rng(0).choice(len(corpus), size=qn, replace=False).tolist())
queries = [s for i, s in enumerate(corpus) if i in pick]
rest = [s for i, s in enumerate(corpus) if i not in pick]
rest = rest if real == "all" else rest[: int(real)]
open(f"{work}/queries.txt", "w", encoding="utf8").write("\n".join(queries) + "\n")
open(f"{work}/real.txt", "w", encoding="utf8").write("\n".join(rest) + "\n")
print(f"{len(corpus)} distinct STS sentences: {len(queries)} queries, {len(rest)} real corpus rows")
PY
for f in queries real; do
  [ -s "$WORK/$f.npy" ] || "$B" encode --input "$WORK/$f.txt" --output "$WORK/$f.npy" >/dev/null
done

# The corpus is made and indexed CHUNK rows at a time (`index build` on the first
# chunk, which fits the quantizer, then `index add`), so that the N x 384 vectors
# never exist twice on disk.
chunk_rows() { # lo hi
  "$PY" scripts/bench_index.py synth --real "$WORK/real.npy" --real-texts "$WORK/real.txt" \
    --n "$N" --lo "$1" --hi "$2" --out "$WORK/x.npy" --texts "$WORK/x.txt"
}
# The first QE queries for the int8 runs (an int8 scan of 10M codes reads 3.8 GB).
"$PY" -c "import numpy as np, sys; q = np.load(sys.argv[1]); np.save(sys.argv[2], q[: int(sys.argv[3])])" \
  "$WORK/queries.npy" "$WORK/queries-int8.npy" "${QN_INT8:-$QN}"

# The exact top 10 of each query over the N rows, by NumPy in one pass over the
# corpus made again block by block (an exact scan per query reads all N vectors).
# Kept per N and QN (the corpus is the same for the same seeds): a rerun reuses it.
truth="$WORK/truth-n$N-q$QN.txt"
[ -s "$truth" ] || "$PY" scripts/bench_index.py truth --real "$WORK/real.npy" \
  --real-texts "$WORK/real.txt" --n "$N" --queries "$WORK/queries.npy" --queries-n "$QN" \
  --out "$truth"

for code in $CODES; do
  idx="$WORK/x.idx"
  rm -f "$idx" "$idx".*
  echo "== index build --quantize $code, $N rows in chunks of $CHUNK"
  start=$(date +%s.%N)
  for (( lo = 0; lo < N; lo += CHUNK )); do
    hi=$(( lo + CHUNK < N ? lo + CHUNK : N ))
    chunk_rows "$lo" "$hi" >/dev/null
    if (( lo == 0 )); then
      /usr/bin/time -f "build of rows 0..$hi: %e s wall, peak RSS %M KiB" \
        "$B" index build --vectors "$WORK/x.npy" --texts "$WORK/x.txt" --quantize "$code" \
        --output "$idx" --chunk 65536 -q 2>&1 | grep -v "declares no model" || true
    else
      /usr/bin/time -f "add of rows $lo..$hi: %e s wall, peak RSS %M KiB" \
        "$B" index add --index "$idx" --vectors "$WORK/x.npy" --texts "$WORK/x.txt" \
        --chunk 65536 -q 2>&1 | grep -v "declares no model" || true
    fi
  done
    echo "build in all (synthesis included): $(echo "$(date +%s.%N) - $start" | bc) s"
  ls -l "$idx" | awk '{printf "file size: %.0f MiB\n", $5 / 1048576}'
  "$B" index info --index "$idx"
  # Drop the file's pages from the page cache where allowed, so that resident
  # memory counts what search reads.
  sync; (echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null || true
  q="$WORK/queries.npy"; case $code in int8*) q="$WORK/queries-int8.npy";; esac
  [ "${QUERY:-1}" = 1 ] || continue
  "$BENCH" query --index "$idx" --query-npy "$q" --truth "$truth" --exact-queries "$QN" \
    --rescore "$RESCORE" --threads "$THREADS" ${SHORTLIST:+--shortlist "$SHORTLIST"}
  [ "${KEEP:-0}" = 1 ] || rm -f "$idx"
done

if [ "${PEERS:-1}" = 1 ] && (( N <= 1000000 )); then
  echo "== peers (faiss, usearch)"
  chunk_rows 0 "$N" >/dev/null
  "$PY" scripts/bench_index.py peers --vectors "$WORK/x.npy" --queries "$WORK/queries.npy" \
    --queries-n "$QN" --rescore "${PEER_RESCORE:-5,10,20,50,100}" --usearch "${USEARCH:-1}" \
    --faiss-threads "${FAISS_THREADS-1,2}"
fi
rm -f "$WORK/x.npy" "$WORK/x.txt"
