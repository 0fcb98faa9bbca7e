"""`maturin build --release` produces an abi3 wheel holding the package."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_abi3_wheel(tmp_path):
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(HERE.parents[1] / "target"))
    subprocess.run([maturin, "build", "--release", "--out", str(tmp_path)], cwd=HERE,
                   env=env, check=True, capture_output=True)
    wheels = list(tmp_path.glob("*.whl"))
    assert len(wheels) == 1, wheels
    assert "-cp39-abi3-" in wheels[0].name
    names = zipfile.ZipFile(wheels[0]).namelist()
    for f in ("bertflow/__init__.py", "bertflow/sts.py", "bertflow/py.typed",
              "bertflow/__init__.pyi", "bertflow/spark/__init__.py",
              "bertflow/spark/__main__.py", "bertflow/spark/_worker.py"):
        assert f in names, f
    assert any(n.startswith("bertflow/_bertflow") and n.endswith(".so") for n in names)
