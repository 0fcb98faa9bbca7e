#!/usr/bin/env bash
# The test command: installs the default model if missing (the encoder tests
# compare against golden vectors from it), then runs every test in the workspace,
# then (re)builds the Python package into .venv and runs its pytest suite
# (bindings/python/tests; arguments for pytest in $PYTEST_ARGS).
# Slow real-data checks (full STS scores) live in `cargo test -- --ignored`
# and `pytest -m slow` (see scripts/slow-tests.sh); CI runs the fast set.
set -euo pipefail
cd "$(dirname "$0")/.."
# Kernels by the built-in rule, so that every process of the run (the binary,
# the Python package, Spark workers) computes the same bits; the measuring path
# has its own tests, which set BERTFLOW_TUNE themselves.
export BERTFLOW_TUNE="${BERTFLOW_TUNE:-0}"
scripts/fetch_model.sh
# The Python requirements install beside the Rust build (scripts/python-deps.sh).
# shellcheck source=scripts/python-deps.sh
. scripts/python-deps.sh
# The lock file must be current before the long build starts.
cargo metadata --locked --format-version 1 >/dev/null
# The default members: every crate (the Python bindings have no Rust test target;
# they are members so that features resolve as in the wheel build below).
cargo test --release --locked "$@"
# The Python tests compare against the release binary: `cargo test` built it
# (the CLI's tests run it), so this is a no-op after a full run. `--bins`, not
# `-p bertflow` (which would resolve features differently and compile most
# crates again) nor `--all-targets` (benches, and the bindings outside maturin).
cargo build --release --locked --bins
python_deps_wait
scripts/python-env.sh
scripts/ensure-java.sh  # the bertflow.spark tests run a local Spark session
set +e
# shellcheck disable=SC2086
.venv/bin/python -m pytest -q bindings/python/tests ${PYTEST_ARGS:-}
rc=$?
set -e
# 5 = no test collected: a failure, unless PYTEST_ARGS deliberately selected none.
if [ "$rc" -eq 5 ] && [ -n "${PYTEST_ARGS:-}" ]; then rc=0; fi
exit "$rc"
