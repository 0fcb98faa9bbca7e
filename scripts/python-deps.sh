# Sourced by scripts/setup.sh and scripts/test.sh: installs .venv's Python
# requirements (`scripts/python-env.sh --requirements`: mostly downloads and
# unpacking, PySpark alone is ~300 MB) in the background while the Rust build
# runs, its output held until `python_deps_wait`, which waits for it, prints
# that output and returns its status. A script that stops before waiting stops
# the install too (the next run installs again: the requirements' stamp is
# written last).
python_deps_log=$(mktemp)
# Its own process group (setsid execs in place in a script's background job), so
# that stopping it stops pip too.
setsid scripts/python-env.sh --requirements >"$python_deps_log" 2>&1 &
python_deps_pid=$!
trap 'kill -- "-$python_deps_pid" 2>/dev/null || true; rm -f "$python_deps_log"' EXIT
python_deps_wait() {
  local rc=0
  wait "$python_deps_pid" || rc=$?
  cat "$python_deps_log" >&2
  rm -f "$python_deps_log"
  trap - EXIT
  return "$rc"
}
