#!/usr/bin/env bash
# Soak test: start `bertflow serve` (release build) on a free port with a search corpus
# or index, run scripts/soak.py against it (64 clients, mixed routes, RSS every 10 s),
# then stop it with SIGTERM and check that it drained and exited 0.
#
#   scripts/soak.sh [DURATION_S [CLIENTS]] [-- extra serve options]
#   SOAK_JSON=soak.json scripts/soak.sh 600 64 -- --index corpus.idx --workers 2
#
# Without --corpus/--index in the extra options, the corpus is the STS-B test
# sentences (../shared/data/sts) if present. Exit status 1 if a response was lost,
# a 5xx was answered, or the server did not stop cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
clients=${2:-64}
shift $(( $# >= 2 ? 2 : $# ))
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
bin=${BERTFLOW_BIN:-target/release/bertflow}
[[ -x "$bin" ]] || cargo build --release -p bertflow
log=$(mktemp)
if [[ ! " ${extra[*]:-} " =~ " --corpus " && ! " ${extra[*]:-} " =~ " --index " ]]; then
  data=${BERTFLOW_DATA:-../shared/data/sts}
  corpus=$(mktemp --suffix .txt)
  if [[ -f "$data/STSBenchmark/sts-test.csv" ]]; then
    cut -f6,7 "$data/STSBenchmark/sts-test.csv" | tr '\t' '\n' | sort -u | head -5000 > "$corpus"
  else
    printf '%s\n' "A man is playing a guitar." "A woman is slicing onions." "A dog runs." > "$corpus"
  fi
  extra+=(--corpus "$corpus")
fi
"$bin" serve --port 0 "${extra[@]}" 2> "$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "listening on" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
url=$(grep -o "http://[0-9.:]*" "$log" | head -1)
status=0
python3 scripts/soak.py --url "$url" --duration "$duration" --clients "$clients" --pid "$pid" \
  ${SOAK_JSON:+--json "$SOAK_JSON"} || status=1
kill -TERM $pid
if wait $pid; then echo "server stopped cleanly"; else echo "server exit status $?"; status=1; fi
trap - EXIT
exit $status
