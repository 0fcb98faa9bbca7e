#!/usr/bin/env bash
# Soak test: start `bertflow serve` (release build) on a free port with a search corpus
# or index, run scripts/soak.py against it (64 clients, mixed routes, RSS every 10 s),
# then stop it with SIGTERM and check that it drained and exited 0.
#
#   scripts/soak.sh [DURATION_S [CLIENTS]] [-- extra serve options]
#   SOAK_JSON=soak.json scripts/soak.sh 600 64 -- --index corpus.idx --workers 2
#   scripts/soak.sh --floods     (the slow group's floods, docs/reliability.md)
#
# --floods: issue 49's probes, one route at a time (scripts/soak_floods.py: 64
# clients, 10 s each, /health timed every 0.1 s, RSS sampled) against the
# default model (texts, token ids, /embed_all, half-sent heads under an
# open-file limit of 512) and the tiny cross-encoder fixture (/rerank, POST /,
# /predict); each server then gets SIGTERM under a flood and must exit within
# its 5 s shutdown timeout (plus 5 s). Fails on a lost request or a 5xx, a p99
# answer over 5 s, /health over 1 s, or a peak RSS over 1500 MB.
#
# Without --corpus/--index in the extra options, the corpus is the STS-B test
# sentences (../shared/data/sts) if present. Exit status 1 if a response was lost,
# a 5xx was answered, or the server did not stop cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--floods" ]]; then
  bin=${BERTFLOW_BIN:-target/release/bertflow}
  [[ -x "$bin" ]] || cargo build --release --bins
  status=0
  flood_server() { # MODEL ROUTE...: floods, then SIGTERM under the first route's flood
    local model=$1; shift
    local log; log=$(mktemp)
    (ulimit -n 512; exec "$bin" serve --model "$model" --port 0 --max-queue-tokens 16384 \
      --shutdown-timeout-ms 5000 --max-connections 512) 2> "$log" &
    local pid=$!
    for _ in $(seq 600); do
      grep -q "listening on" "$log" && break
      kill -0 $pid 2>/dev/null || { cat "$log"; return 1; }
      sleep 0.5
    done
    local url; url=$(grep -o "http://[0-9.:]*" "$log" | head -1)
    for route in "$@"; do
      python3 scripts/soak_floods.py --url "$url" --route "$route" --pid $pid --max-rss-mb 1500 || status=1
    done
    python3 scripts/soak_floods.py --url "$url" --route "$1" --duration 8 --health-s 1000 >/dev/null &
    local flood=$!
    sleep 2
    local start; start=$(date +%s)
    kill -TERM $pid
    wait $pid || true
    local took=$(( $(date +%s) - start ))
    echo "SIGTERM under the $1 flood: exited after ${took} s"
    (( took <= 10 )) || { echo "FAIL: over the 5 s shutdown timeout"; status=1; }
    wait $flood || true
  }
  flood_server "${BERTFLOW_MODEL:-models/all-MiniLM-L6-v2}" embed_texts embed_ids v1_ids embed_all half_headers
  # A one-label head: /rerank needs one (tiny-bert-cls has two labels, a 424 on /rerank).
  flood_server crates/encoder/tests/fixtures/tiny-roberta-cls rerank root_rerank predict half_headers
  exit $status
fi
duration=${1:-600}
clients=${2:-64}
shift $(( $# >= 2 ? 2 : $# ))
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
bin=${BERTFLOW_BIN:-target/release/bertflow}
[[ -x "$bin" ]] || cargo build --release --bins
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
