"""Shared fixtures: the repository root, the release binary, the model, the data."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
DATA = Path(os.environ.get("BERTFLOW_DATA") or (ROOT / ".." / "shared" / "data" / "sts")).resolve()

SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "The cat sits on the mat.",
    "A man is playing the flute.",
    "Two dogs are running through a field of snow.",
    "Stocks fell sharply on Monday after the central bank raised interest rates again.",
    "The quick brown fox jumps over the lazy dog.",
    "A plane is taking off.",
    "An airplane departs from the runway.",
    "Héllo wörld, ünïcode ok? 日本語も。",
    "x",
    "A child is reading a book in the library while it rains outside.",
]


def _binary():
    exe = os.environ.get("BERTFLOW_BIN")
    if exe:
        return Path(exe)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or (ROOT / "target"))
    return target / "release" / "bertflow"


@pytest.fixture(scope="session")
def bertflow_bin():
    exe = _binary()
    if not exe.is_file():
        pytest.fail(f"{exe} is missing: build it with `cargo build --release -p bertflow`")
    return exe


@pytest.fixture(scope="session")
def model_dir():
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"{MODEL} is missing: run scripts/fetch_model.sh")
    return MODEL


@pytest.fixture(scope="session")
def data_dir():
    if not (DATA / "STS16").is_dir():
        pytest.fail(f"STS data missing at {DATA}: set BERTFLOW_DATA")
    return DATA


@pytest.fixture(scope="session")
def encoder(model_dir):
    import bertflow

    return bertflow.Encoder(model_dir, pooling="last-avg", cache=False)


@pytest.fixture(scope="session")
def run_cli(bertflow_bin):
    def run(*args, check=True):
        p = subprocess.run(
            [str(bertflow_bin), "--quiet", *map(str, args)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"bertflow {' '.join(map(str, args))} failed:\n{p.stderr}")
        return p

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def correlated(rng, n, d, rank=None):
    """n x d float32 rows with a strongly non-isotropic covariance."""
    rank = rank or d
    base = rng.standard_normal((n, rank))
    mix = rng.standard_normal((rank, d)) * np.linspace(3.0, 0.1, rank)[:, None]
    return (base @ mix + rng.standard_normal(d) * 2).astype(np.float32)
