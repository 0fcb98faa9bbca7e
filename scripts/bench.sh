#!/usr/bin/env bash
# bertflow against its PyTorch references, on the same data and machine:
#
#   1. encoder throughput on the unique sentences of STS-B test:
#      `bertflow bench encode --threads 1,2` vs scripts/reference/st_encode_bench.py
#      (sentence-transformers, torch.set_num_threads 1 and 2);
#   2. one epoch of the default BERT-flow (L=3, K=3, W=32, Adam 1e-3, batch 32) on the
#      29,511 unique sentences of all seven tasks: `bertflow bench flow` vs
#      scripts/reference/flow_torch.py (1 and 2 torch threads with PyTorch's default
#      Adam, and 1 thread with its fused Adam) on the very same embedding matrix
#      (written with --save-npy);
#
# then prints a summary with the ratios. Results (JSON and logs) go to $BENCH_OUT
# [default: target/bench/<date-time>]. See benchmarks/encode.md and benchmarks/flow.md.
#
# Environment:
#   REF_PYTHON      Python with torch, sentence-transformers, numpy [default: .venv-ref,
#                   created from scripts/reference/requirements.txt when missing]
#   BENCH_MAX_LOAD  wait before each timed step until the 1-minute load average is
#                   below this [1.5]; BENCH_MAX_WAIT seconds at most [1800], then go on
#                   with a warning
#   BENCH_REPEAT    timed runs per measurement [3]
#   BERTFLOW_MODEL, BERTFLOW_DATA, BERTFLOW_CACHE  as for bertflow
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MAX_LOAD=${BENCH_MAX_LOAD:-1.5}
MAX_WAIT=${BENCH_MAX_WAIT:-1800}
REPEAT=${BENCH_REPEAT:-3}
OUT=${BENCH_OUT:-target/bench/$(date +%Y%m%d-%H%M%S)}
MODEL=${BERTFLOW_MODEL:-models/all-MiniLM-L6-v2}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -z "${REF_PYTHON:-}" ]]; then
    if [[ ! -x .venv-ref/bin/python ]]; then
        echo "== creating the reference venv .venv-ref (torch from PyPI is large)"
        python3 -m venv .venv-ref
        .venv-ref/bin/pip install -r scripts/reference/requirements.txt
    fi
    REF_PYTHON=$ROOT/.venv-ref/bin/python
fi
"$REF_PYTHON" -c 'import torch, sentence_transformers, numpy' ||
    { echo "error: $REF_PYTHON lacks torch, sentence-transformers or numpy" >&2; exit 1; }

[[ -d "$MODEL" ]] || scripts/fetch_model.sh

echo "== building bertflow (release)"
cargo build --release -p bertflow
# A private copy: other builds in the shared target directory must not swap the
# binary under a running benchmark.
BIN=$OUT/bertflow
cp target/release/bertflow "$BIN"

load1() { cut -d' ' -f1 /proc/loadavg; }

# Wait until the 1-minute load average is below MAX_LOAD (other builds and tests).
wait_quiet() {
    local waited=0
    while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }'; do
        if ((waited >= MAX_WAIT)); then
            echo "warning: load average still $(load1) after ${waited}s; measuring anyway" >&2
            return
        fi
        ((waited == 0)) && echo "   waiting for a quiet machine (load $(load1), want < $MAX_LOAD) ..."
        sleep 15
        waited=$((waited + 15))
    done
    echo "   load average $(load1) (uptime: $(uptime | sed 's/.*load average: //'))"
}

{
    echo "date: $(date -Is)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "kernel: $(uname -r)"
    echo "rustc: $(rustc --version)"
    echo "bertflow: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ local changes)')"
    echo "python: $("$REF_PYTHON" --version 2>&1), torch $("$REF_PYTHON" -c 'import torch; print(torch.__version__)'), sentence-transformers $("$REF_PYTHON" -c 'import sentence_transformers as s; print(s.__version__)')"
} | tee "$OUT/machine.txt"

echo "== encode: bertflow bench encode --threads 1,2 --repeat $REPEAT"
wait_quiet
"$BIN" bench encode --model "$MODEL" --pooling last-avg --threads 1,2 --batch-size 32 \
    --repeat "$REPEAT" --json | tee "$OUT/encode_bertflow.json"
echo "== encode: st_encode_bench.py --threads 1,2 --repeat $REPEAT"
wait_quiet
"$REF_PYTHON" scripts/reference/st_encode_bench.py --model "$MODEL" --threads 1,2 --batch-size 32 \
    --repeat "$REPEAT" --json | tee "$OUT/encode_torch.json"

echo "== flow: encoding the fit corpus (through the cache) to $OUT/fit_emb.npy"
"$BIN" -q bench flow --model "$MODEL" --pooling last-avg --save-npy "$OUT/fit_emb.npy" --repeat 0
echo "== flow: bertflow bench flow --repeat $REPEAT"
wait_quiet
"$BIN" bench flow --model "$MODEL" --pooling last-avg --repeat "$REPEAT" --json | tee "$OUT/flow_bertflow.json"
# PyTorch flow configurations: torch threads and Adam implementation.
for cfg in 1:default 2:default 1:fused; do
    t=${cfg%%:*} adam=${cfg#*:}
    : >"$OUT/flow_torch_t${t}_$adam.jsonl"
    for ((r = 1; r <= REPEAT; r++)); do
        echo "== flow: flow_torch.py --threads $t --adam $adam (run $r of $REPEAT)"
        wait_quiet
        "$REF_PYTHON" scripts/reference/flow_torch.py "$OUT/fit_emb.npy" --threads "$t" --adam "$adam" --json |
            tee "$OUT/flow_torch.log" | tail -n 1 >>"$OUT/flow_torch_t${t}_$adam.jsonl"
        head -n 3 "$OUT/flow_torch.log"
    done
done

echo
echo "== summary (results in $OUT)"
"$REF_PYTHON" - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out = sys.argv[1]
enc_rs = json.load(open(f"{out}/encode_bertflow.json"))
enc_py = json.load(open(f"{out}/encode_torch.json"))
py = {r["threads"]: r for r in enc_py["results"]}
print(f"Encoding {enc_rs['sentences']} unique STS-B test sentences ({enc_rs['model']}, batch {enc_rs['batch_size']}), sentences/s, best (median):")
print(f"{'threads':>8} {'bertflow':>18} {'sentence-transformers':>24} {'ratio':>7}")
for r in enc_rs["results"]:
    t = r["threads"]
    p = py.get(t)
    ps = f"{p['best_sentences_per_s']:.1f} ({p['median_sentences_per_s']:.1f})" if p else "-"
    ratio = f"{r['best_sentences_per_s'] / p['best_sentences_per_s']:.2f}x" if p else "-"
    print(f"{t:>8} {r['best_sentences_per_s']:>9.1f} ({r['median_sentences_per_s']:.1f}) {ps:>24} {ratio:>7}")
flow = json.load(open(f"{out}/flow_bertflow.json"))
runs = flow["runs"]
print(f"\nBERT-flow fit, 1 epoch on {flow['sentences']} x {flow['dim']} ({flow['spec']}), seconds, best (median):")
print(f"  {'bertflow (1 thread):':<36} {flow['best_seconds']:.2f} ({flow['median_seconds']:.2f}) s, "
      f"NLL {runs[0]['initial_loss']:.3f} -> {runs[0]['final_loss']:.3f} bits/dim")
for t, adam in ((1, "default"), (2, "default"), (1, "fused")):
    rs = [json.loads(l) for l in open(f"{out}/flow_torch_t{t}_{adam}.jsonl") if l.strip()]
    secs = [r["seconds"] for r in rs]
    best, med = min(secs), statistics.median(secs)
    label = f"PyTorch ({t} thread{'s' if t > 1 else ''}, Adam {adam}):"
    print(f"  {label:<36} {best:.2f} ({med:.2f}) s, "
          f"NLL {rs[0]['initial_loss']:.3f} -> {rs[0]['final_loss']:.3f} bits/dim; "
          f"bertflow is {best / flow['best_seconds']:.1f}x faster")
PY
