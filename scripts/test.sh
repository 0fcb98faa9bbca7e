#!/usr/bin/env bash
# The test command: installs the default model if missing (the encoder tests
# compare against golden vectors from it), then runs every test in the workspace.
# Slow real-data checks (full STS scores) live in `cargo test -- --ignored`
# (see scripts/slow-tests.sh); CI runs the fast set.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh
cargo test --workspace --release --locked "$@"
