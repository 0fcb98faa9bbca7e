#!/usr/bin/env bash
# The quantized-index benchmark (issue 33; not in CI): N synthetic vectors drawn from
# a Gaussian with all-MiniLM-L6-v2's fitted mean and covariance (on STS sentences),
# real STS sentences mixed in, real STS queries. For each code (binary:itq=true,
# int8): `bertflow index build --vectors --quantize` (time, peak memory, file size),
# then index_bench query (recall@10 against exact fp32, p50/p99 at 1 and 2 threads,
# resident memory while searching). Then faiss peers on the same vectors.
#
#   N=1000000 scripts/bench_index.sh            (N=10000000 needs > 25 GB free)
#
# Environment: N, REAL (real sentences, 5000), QN (queries, 200), WORK (scratch
# directory), PY (python with numpy and faiss: /work/wt/venv-ref), CODES, PEERS=0.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}
REAL=${REAL:-5000}
QN=${QN:-200}
WORK=${WORK:-$PWD/target/bench-index}
PY=${PY:-/work/wt/venv-ref/bin/python}
CODES=${CODES:-"binary:itq=true int8"}
DATA=${BERTFLOW_DATA:-/work/shared/data/sts}
export BERTFLOW_MODEL=${BERTFLOW_MODEL:-$PWD/models/all-MiniLM-L6-v2} BERTFLOW_TUNE=0
B=target/release/bertflow
BENCH=target/release/examples/index_bench
mkdir -p "$WORK"
need=$(( N * 384 * 4 * 23 / 10 / 1000000000 + 1 ))
free=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
if (( free < need )); then
  echo "only ${free} GB free in $WORK, ${need} GB needed for N=$N: run a smaller N" >&2
  exit 1
fi
cargo build --release --offline -p bertflow >/dev/null
cargo build --release --offline -p bertflow-index --example index_bench >/dev/null
lscpu | grep -E "Model name|^CPU\(s\)"
echo "N=$N REAL=$REAL QN=$QN"

# STS sentences: the first sentence of QN test pairs are the queries, their second
# sentences and REAL - QN more are the real corpus rows.
"$PY" - "$DATA/STSBenchmark" "$WORK" "$REAL" "$QN" <<'PY'
import sys, csv
src, work, real, qn = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pairs = []
for split in ("test", "dev", "train"):
    for line in open(f"{src}/sts-{split}.csv", encoding="utf8"):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 7:
            pairs.append((f[5].strip(), f[6].strip()))
queries = [a for a, _ in pairs[:qn]]
corpus, seen = [], set()
for s in [b for _, b in pairs[:qn]] + [x for p in pairs[qn:] for x in p]:
    if s and s not in seen:
        seen.add(s); corpus.append(s)
    if len(corpus) == real:
        break
open(f"{work}/queries.txt", "w", encoding="utf8").write("\n".join(queries) + "\n")
open(f"{work}/real.txt", "w", encoding="utf8").write("\n".join(corpus) + "\n")
PY
for f in queries real; do
  [ -s "$WORK/$f.npy" ] || "$B" encode --input "$WORK/$f.txt" --output "$WORK/$f.npy" --no-cache >/dev/null
done
"$PY" scripts/bench_index.py synth --real "$WORK/real.npy" --real-texts "$WORK/real.txt" \
  --n "$N" --out "$WORK/x.npy" --texts "$WORK/x.txt"

for code in $CODES; do
  idx="$WORK/x.idx"
  echo "== index build --quantize $code"
  /usr/bin/time -f "build: %e s wall, peak RSS %M KiB" \
    "$B" index build --vectors "$WORK/x.npy" --texts "$WORK/x.txt" --quantize "$code" \
    --output "$idx" --chunk 65536 --no-cache 2>&1 | grep -v "declares no model" || true
  ls -l "$idx" | awk '{printf "file size: %.0f MiB\n", $5 / 1048576}'
  "$B" index info --index "$idx"
  # Drop the file's pages from the page cache where allowed, so that resident
  # memory counts what search reads.
  sync; (echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null || true
  "$BENCH" query --index "$idx" --query-npy "$WORK/queries.npy" --exact-queries "$QN" \
    --rescore 1,2,5,10,20 --threads 1,2
  rm -f "$idx"
done

if [ "${PEERS:-1}" = 1 ]; then
  echo "== peers (faiss)"
  "$PY" scripts/bench_index.py peers --vectors "$WORK/x.npy" --queries "$WORK/queries.npy" \
    --queries-n "$QN"
fi
rm -f "$WORK/x.npy" "$WORK/x.txt"
