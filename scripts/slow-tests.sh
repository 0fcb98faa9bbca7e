#!/usr/bin/env bash
# The slow real-data group: every STS regression test on all seven tasks and the
# full-size versions of the CLI's end-to-end tests, then the Python package's slow
# tests (all seven tasks against the CLI, the abi3 wheel build, Spark on every
# STS-B sentence), and the headless-browser checks of the playground page and the
# report. CI runs the reduced versions via scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh
# The CLI's slow tests (crates/cli/tests/it: one binary, a module per topic): every
# `#[ignore = "slow: ..."]` test but the browser's (below).
cargo test --release --locked -p bertflow --test it -- --ignored --skip browser:: "$@"
# Fuzzing: every reader of outside bytes under the stable byte-mutation harness,
# BERTFLOW_FUZZ_ITERS inputs (default 20,000) or BERTFLOW_FUZZ_SECS seconds
# (default 60) per target (benchmarks/fuzz.md; the cargo-fuzz targets are in fuzz/).
cargo test --release --locked -p bertflow-fuzzkit --test it -- fuzz:: --ignored "$@"
# int8 encoder: mean cosine to fp32 >= 0.99 over the unique sentences of STS-B test.
cargo test --release --locked -p bertflow-encoder --test it -- int8:: --ignored "$@"
# all-mpnet-base-v2 (opt-in download, scripts/fetch_mpnet.sh) through the encoder's
# last-avg against transformers on 300 STS-B test sentences; the reference vectors
# are made with a torch environment named by BERTFLOW_REF_PYTHON (the test skips with
# a message without them).
scripts/fetch_mpnet.sh
if [ -n "${BERTFLOW_REF_PYTHON:-}" ] && [ ! -f models/reference/all-mpnet-base-v2-stsb-last-avg.json ]; then
  "$BERTFLOW_REF_PYTHON" scripts/reference/mpnet_stsb_reference.py
fi
cargo test --release --locked -p bertflow-encoder --test it -- real_mpnet:: --ignored "$@"
# Headless Chromium (Debian's package) opens the playground and the report; the tests
# skip with a message when no browser can be had.
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium \
    || echo "could not install chromium: the browser tests will be skipped"
fi
cargo test --release --locked -p bertflow --test it -- --ignored browser:: "$@"
# The server's floods (issue 49's probes): every route refused or answered within 5 s,
# /health within 1 s, bounded memory, SIGTERM within the shutdown timeout.
scripts/soak.sh --floods
scripts/python-env.sh
scripts/ensure-java.sh
.venv/bin/python -m pytest -q -m slow bindings/python/tests
