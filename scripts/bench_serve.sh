#!/usr/bin/env bash
# Benchmark `bertflow serve` on loopback: requests/s and p50/p99 latency of
# POST /v1/embeddings with one sentence per request, for 1, 8 and 64
# concurrent clients (wrk, one keep-alive connection per client), plus the
# offline `bertflow encode` throughput on the same machine for comparison;
# then text-embeddings-inference's POST /embed against POST /v1/embeddings on
# the same server in the same run (TEI_CLIENTS clients of one sentence each,
# the two routes alternating TEI_ROUNDS times): both share the batcher, so
# their throughput should agree within noise.
#
# Usage: scripts/bench_serve.sh [extra `bertflow serve` options...]
#   e.g. scripts/bench_serve.sh --workers 1
# Environment:
#   DURATION  seconds per concurrency level (default 20)
#   WARMUP    seconds of warm-up before the first level (default 5)
#   CLIENTS   concurrency levels (default "1 8 64")
#   BERTFLOW_MODEL  model (default models/all-MiniLM-L6-v2, see scripts/fetch_model.sh)
#   TEI_CLIENTS  clients of the /embed vs /v1/embeddings comparison (default 64; 0 skips it)
#   TEI_ROUNDS   alternations of the two routes (default 2)
# Installs wrk with apt-get when it is missing. Run it on a quiet machine:
# the load generator and the server share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-20}
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-"1 8 64"}
TEI_CLIENTS=${TEI_CLIENTS:-64}
TEI_ROUNDS=${TEI_ROUNDS:-2}

if ! command -v wrk >/dev/null; then
    echo "installing wrk..." >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get install -y wrk >/dev/null || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y wrk >/dev/null; }
fi
command -v curl >/dev/null || { echo "curl is required" >&2; exit 1; }

cargo build --release --bins >&2
BIN=target/release/bertflow

TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# Typical STS-length sentences (8-25 tokens), one per request, in rotation.
SENTENCES=(
    "A man is playing a guitar."
    "A woman is slicing onions in the kitchen."
    "Two dogs are running through a field of tall grass."
    "The stock market fell sharply after the central bank raised interest rates."
    "A child is riding a red bicycle down the street."
    "Scientists have discovered a new species of frog in the Amazon rainforest."
    "She poured the coffee and watched the rain fall on the empty square."
    "The committee will review all applications submitted before the end of March."
    "Three men are playing chess in the park."
    "The new smartphone features a larger battery and an improved camera."
    "A plane is taking off from the runway."
    "The river flooded the village after three days of heavy rain."
    "A baby is laughing at a cartoon."
    "The meeting has been postponed until further notice."
    "A cat is sleeping on a warm windowsill."
    "Photosynthesis converts light energy into chemical energy."
)

{
    echo "local bodies = {"
    for s in "${SENTENCES[@]}"; do printf '  [[{"input": "%s"}]],\n' "$s"; done
    cat <<'EOF'
}
local headers = { ["Content-Type"] = "application/json" }
local i = 0
request = function()
  i = i + 1
  return wrk.format("POST", nil, headers, bodies[(i % #bodies) + 1])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d rps=%.1f p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f socket_errors=%d non2xx=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000, e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
} >"$TMP/embed.lua"
# The same requests in TEI's shape.
sed 's/\[\[{"input": /[[{"inputs": /' "$TMP/embed.lua" >"$TMP/tei.lua"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" >&2
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Offline baseline: bertflow encode on 2048 distinct sentences (the cache is off and
# encode deduplicates, so every sentence is new), with its default 2 threads; the
# time of encoding a single sentence (model loading) is subtracted.
for k in $(seq 0 127); do
    for s in "${SENTENCES[@]}"; do echo "$s (case $k)"; done
done >"$TMP/offline.txt"
head -1 "$TMP/offline.txt" >"$TMP/one.txt"
seconds() {
    local start end
    start=$(date +%s.%N)
    "$BIN" encode -q --no-cache -i "$1" -o "$TMP/offline.npy"
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" 'BEGIN { print e - s }'
}
T_ONE=$(seconds "$TMP/one.txt")
T_ALL=$(seconds "$TMP/offline.txt")
OFFLINE=$(awk -v a="$T_ALL" -v o="$T_ONE" 'BEGIN { printf "%.0f", 2048 / (a - o) }')
echo "offline bertflow encode: $OFFLINE sentences/s (2048 sentences in ${T_ALL} s, minus ${T_ONE} s for loading)" >&2

"$BIN" serve --host 127.0.0.1 --port 0 "$@" 2>"$TMP/serve.log" &
SERVER_PID=$!
ADDR=""
for _ in $(seq 1 600); do
    ADDR=$(grep -o 'listening on http://[0-9.:]*' "$TMP/serve.log" | head -1 | sed 's/listening on //') || true
    [ -n "$ADDR" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/serve.log" >&2; exit 1; }
    sleep 0.2
done
[ -n "$ADDR" ] || { echo "the server printed no address" >&2; cat "$TMP/serve.log" >&2; exit 1; }
until curl -sf "$ADDR/health" >/dev/null; do sleep 0.2; done
echo "server: $ADDR ($(curl -s "$ADDR/info" | grep -o '"workers":[0-9]*'))" >&2

batches() { curl -s "$ADDR/info" | grep -o '"batches":[0-9]*' | cut -d: -f2; }

wrk -t1 -c8 -d"${WARMUP}s" -s "$TMP/embed.lua" "$ADDR/v1/embeddings" >/dev/null

ROWS=""
for c in $CLIENTS; do
    b0=$(batches)
    out=$(wrk -t1 -c"$c" -d"${DURATION}s" --timeout 30s -s "$TMP/embed.lua" "$ADDR/v1/embeddings")
    b1=$(batches)
    line=$(grep '^BENCH' <<<"$out")
    echo "clients=$c $line batches=$((b1 - b0))" >&2
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $line"; }
    req=$(get requests)
    per_batch=$(awk -v r="$req" -v b="$((b1 - b0))" 'BEGIN { printf "%.1f", (b > 0 ? r / b : 0) }')
    ROWS+="| $c | $(get requests) | $(get rps) | $(get p50_ms) | $(get p90_ms) | $(get p99_ms) | $(get max_ms) | $per_batch | $(get non2xx) | $(get socket_errors) |"$'\n'
done

# TEI's /embed against /v1/embeddings, alternating on the same server.
TEI_ROWS=""
declare -A RPS_SUM=([embed]=0 [v1]=0)
RATIOS=""  # per round: /embed requests/s over the /v1/embeddings run just before it
if [ "$TEI_CLIENTS" -gt 0 ]; then
    for round in $(seq 1 "$TEI_ROUNDS"); do
        for route in v1 embed; do
            if [ "$route" = v1 ]; then path=/v1/embeddings; lua=embed.lua; else path=/embed; lua=tei.lua; fi
            out=$(wrk -t1 -c"$TEI_CLIENTS" -d"${DURATION}s" --timeout 30s -s "$TMP/$lua" "$ADDR$path")
            line=$(grep '^BENCH' <<<"$out")
            echo "round=$round route=$path clients=$TEI_CLIENTS $line" >&2
            get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $line"; }
            RPS_SUM[$route]=$(awk -v a="${RPS_SUM[$route]}" -v b="$(get rps)" 'BEGIN { print a + b }')
            if [ "$route" = v1 ]; then LAST_V1=$(get rps); else RATIOS+="$(awk -v e="$(get rps)" -v v="$LAST_V1" 'BEGIN { printf "%.3f", e / v }') "; fi
            TEI_ROWS+="| $round | POST $path | $(get requests) | $(get rps) | $(get p50_ms) | $(get p99_ms) | $(get non2xx) | $(get socket_errors) |"$'\n'
        done
    done
fi

kill -TERM "$SERVER_PID"
STATUS=0
if wait "$SERVER_PID"; then
    echo "server stopped cleanly" >&2
else
    STATUS=$?
    echo "error: the server exited with status $STATUS after SIGTERM" >&2
fi
SERVER_PID=""

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
echo "POST /v1/embeddings, one sentence per request, ${DURATION} s per row; offline \`bertflow encode\`: $OFFLINE sentences/s."
echo
echo "| clients | requests | requests/s | p50 ms | p90 ms | p99 ms | max ms | inputs/batch | non-2xx | socket errors |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s' "$ROWS"
if [ "$TEI_CLIENTS" -gt 0 ]; then
    RATIO=$(awk -v e="${RPS_SUM[embed]}" -v v="${RPS_SUM[v1]}" 'BEGIN { printf "%.3f", (v > 0 ? e / v : 0) }')
    MEDIAN=$(tr ' ' '\n' <<<"$RATIOS" | grep . | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }')
    echo
    echo "TEI's POST /embed against POST /v1/embeddings, $TEI_CLIENTS clients of one sentence each, alternating, ${DURATION} s per row; /embed requests/s over /v1/embeddings requests/s: $RATIO over the sums of the rounds, $MEDIAN the median of the rounds' ratios (each /embed run over the /v1/embeddings run just before it: $RATIOS)."
    echo
    echo "| round | route | requests | requests/s | p50 ms | p99 ms | non-2xx | socket errors |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|"
    printf '%s' "$TEI_ROWS"
fi
exit "$STATUS"
