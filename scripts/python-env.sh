#!/usr/bin/env bash
# The project's Python environment: creates .venv (git-ignored) with
# bindings/python/requirements-dev.txt (maturin, numpy, scikit-learn, pytest)
# and bindings/python/requirements-spark.txt (pyspark, pyarrow, pandas: the
# `spark` extra), then builds the `bertflow` Python package from
# bindings/python as an abi3 wheel and installs it into .venv. Idempotent: the
# requirements are installed again only when a file changes, the wheel only
# when it changes. The build shares target/ with the workspace, so the
# bertflow crates are not compiled twice. Needs cargo and python3 (>= 3.9) with venv and pip.
# `--requirements`: only the venv and its requirements, no wheel (setup.sh and
# test.sh run that part beside the Rust build: scripts/python-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
venv=.venv
reqs=(bindings/python/requirements-dev.txt bindings/python/requirements-spark.txt)
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv ..." >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.bertflow-requirements.sha256"
want=$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing ${reqs[*]} into $venv ..." >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]/#/-r}"
  echo "$want" >"$stamp"
fi
if [ "${1:-}" = --requirements ]; then exit 0; fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
out="$CARGO_TARGET_DIR/wheels"
rm -f "$out"/bertflow-*.whl
(cd bindings/python && VIRTUAL_ENV="$PWD/../../$venv" "../../$venv/bin/maturin" build \
  --release --locked --quiet --interpreter "../../$venv/bin/python" --out "$out") >&2
wheel=$(ls "$out"/bertflow-*.whl)
wstamp="$venv/.bertflow-wheel.sha256"
whash=$(sha256sum "$wheel" | cut -d' ' -f1)
if [ "$(cat "$wstamp" 2>/dev/null)" != "$whash" ] || ! "$venv/bin/python" -c "import bertflow" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  echo "$whash" >"$wstamp"
  echo "installed $(basename "$wheel") into $venv" >&2
fi
# `source .venv/bin/activate` puts the bertflow command on PATH beside python
# (a link to the release binary, which scripts/setup.sh and scripts/test.sh build).
ln -sfn "$CARGO_TARGET_DIR/release/bertflow" "$venv/bin/bertflow"
