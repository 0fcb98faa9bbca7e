#!/usr/bin/env bash
# Writes the seed corpora of every cargo-fuzz target into fuzz/corpus/<target>/
# (generated from valid files by bertflow-fuzzkit; not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --locked -q -p bertflow-fuzzkit --bin fuzz-seeds -- fuzz/corpus
