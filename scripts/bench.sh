#!/usr/bin/env bash
# bertflow against its references (ONNX Runtime, PyTorch), on the same data and machine:
#
#   1. encoder throughput on the unique sentences of STS-B test (batch 32, batches of
#      one token length on both sides): `bertflow bench encode --precision fp32,int8
#      --threads 1,2` vs scripts/reference/ort_encode_bench.py (ONNX Runtime fp32 and
#      dynamic int8, exported by scripts/reference/ort_export.py from the same
#      checkpoint, intra_op_num_threads 1 and 2), the same script with --runtime
#      openvino (OpenVINO reading the same fp32 ONNX file, INFERENCE_PRECISION_HINT
#      f32, INFERENCE_NUM_THREADS 1 and 2) and st_encode_bench.py
#      (sentence-transformers); BENCH_ROUNDS rounds, interleaved, so a busy spell
#      hits both sides; then single-sentence latency (batch 1, p50/p99) and the
#      natural mixed-length stream (every STS-B test sentence in file order,
#      consecutive padded batches), bertflow vs ONNX Runtime;
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
#   REF_PYTHON      Python with torch, sentence-transformers, numpy, onnxruntime, onnx,
#                   openvino [default: .venv-ref,
#                   created from scripts/reference/requirements.txt when missing]
#   BENCH_MAX_LOAD  wait before each timed step until the 1-minute load average is
#                   below this [1.5]; BENCH_MAX_WAIT seconds at most [1800], then go on
#                   with a warning
#   BENCH_REPEAT    timed runs per measurement [3]
#   BENCH_ROUNDS    interleaved rounds of the encode throughput comparison [3]
#   BENCH_PARTS     which parts: encode, latency, stream, flow [encode,latency,stream,flow]
#   BERTFLOW_MODEL, BERTFLOW_DATA, BERTFLOW_CACHE  as for bertflow
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MAX_LOAD=${BENCH_MAX_LOAD:-1.5}
MAX_WAIT=${BENCH_MAX_WAIT:-1800}
REPEAT=${BENCH_REPEAT:-3}
ROUNDS=${BENCH_ROUNDS:-3}
PARTS=${BENCH_PARTS:-encode,latency,stream,flow}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
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
"$REF_PYTHON" -c 'import torch, sentence_transformers, numpy, onnxruntime, onnx, openvino' ||
    { echo "error: $REF_PYTHON lacks torch, sentence-transformers, numpy, onnxruntime, onnx or openvino" >&2; exit 1; }

[[ -d "$MODEL" ]] || scripts/fetch_model.sh
ORT_DIR=target/ort
if [[ ! -f $ORT_DIR/model_fp32.onnx || ! -f $ORT_DIR/model_int8.onnx ]]; then
    echo "== exporting $MODEL to ONNX ($ORT_DIR)"
    "$REF_PYTHON" scripts/reference/ort_export.py --model "$MODEL" --out "$ORT_DIR"
fi

echo "== building bertflow (release)"
cargo build --release --bins
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
    echo "python: $("$REF_PYTHON" --version 2>&1), torch $("$REF_PYTHON" -c 'import torch; print(torch.__version__)'), sentence-transformers $("$REF_PYTHON" -c 'import sentence_transformers as s; print(s.__version__)'), onnxruntime $("$REF_PYTHON" -c 'import onnxruntime as o; print(o.__version__)'), openvino $("$REF_PYTHON" -c 'import openvino as o; print(o.__version__)')"
    echo "cpu family/model: $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2- | tr -d ' ')/$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2- | tr -d ' ')"
    echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|avx512_bf16)$' | tr '\n' ' ')"
} | tee "$OUT/machine.txt"

PY=$REF_PYTHON
ORT=scripts/reference/ort_encode_bench.py
if part encode; then
    for ((r = 1; r <= ROUNDS; r++)); do
        echo "== encode round $r of $ROUNDS: bertflow fp32,int8"
        wait_quiet
        "$BIN" bench encode --model "$MODEL" --pooling last-avg --precision fp32,int8 --threads 1,2 \
            --batch-size 32 --repeat "$REPEAT" --json >"$OUT/encode_bertflow_r$r.json"
        for p in fp32 int8; do
            echo "== encode round $r of $ROUNDS: ONNX Runtime $p"
            wait_quiet
            "$PY" $ORT --onnx $ORT_DIR/model_$p.onnx --model "$MODEL" --threads 1,2 --batch-size 32 \
                --repeat "$REPEAT" --json >"$OUT/encode_ort_${p}_r$r.json"
        done
        echo "== encode round $r of $ROUNDS: OpenVINO f32 (same fp32 ONNX file)"
        wait_quiet
        "$PY" $ORT --runtime openvino --onnx $ORT_DIR/model_fp32.onnx --model "$MODEL" --threads 1,2 \
            --batch-size 32 --repeat "$REPEAT" --json >"$OUT/encode_ov_fp32_r$r.json"
        echo "== encode round $r of $ROUNDS: sentence-transformers"
        wait_quiet
        "$PY" scripts/reference/st_encode_bench.py --model "$MODEL" --threads 1,2 --batch-size 32 \
            --repeat "$REPEAT" --json >"$OUT/encode_torch_r$r.json"
    done
fi
if part latency; then
    echo "== latency (batch 1): bertflow fp32,int8, ONNX Runtime fp32, int8 (1 thread)"
    wait_quiet
    "$BIN" bench encode --model "$MODEL" --mode latency --precision fp32,int8 --threads 1 \
        --repeat 1 --json >"$OUT/latency_bertflow.json"
    for p in fp32 int8; do
        "$PY" $ORT --mode latency --onnx $ORT_DIR/model_$p.onnx --model "$MODEL" --threads 1 \
            --repeat 1 --json >"$OUT/latency_ort_$p.json"
    done
fi
if part stream; then
    echo "== stream (file order, padded batches of 32): bertflow fp32,int8, ONNX Runtime fp32, int8"
    wait_quiet
    "$BIN" bench encode --model "$MODEL" --mode stream --precision fp32,int8 --threads 1,2 \
        --repeat "$REPEAT" --json >"$OUT/stream_bertflow.json"
    for p in fp32 int8; do
        "$PY" $ORT --mode stream --onnx $ORT_DIR/model_$p.onnx --model "$MODEL" --threads 1,2 \
            --repeat "$REPEAT" --json >"$OUT/stream_ort_$p.json"
    done
fi
"$PY" scripts/reference/encode_summary.py "$OUT" | tee "$OUT/encode_summary.txt"
part flow || exit 0

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
flow = json.load(open(f"{out}/flow_bertflow.json"))
runs = flow["runs"]
print(f"BERT-flow fit, 1 epoch on {flow['sentences']} x {flow['dim']} ({flow['spec']}), seconds, best (median):")
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
