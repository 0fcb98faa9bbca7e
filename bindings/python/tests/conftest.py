"""Shared fixtures: the repository root, the release binary, the model, the data."""

import contextlib
import os
import subprocess
import threading
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
        pytest.fail(f"{exe} is missing: build it with `cargo build --release --bins`")
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


# ---- Spark (bertflow.spark): one local session shared by every test -------------

SPARK_CONF = {
    # local[2,2]: 2 cores, a failed task is tried twice (local mode takes the
    # attempts from the master string and ignores spark.task.maxFailures,
    # which is set for clarity).
    "spark.task.maxFailures": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession for the whole test run (one JVM start: 6-15 s)."""
    try:
        import pyspark  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as e:
        pytest.fail(f"{e}: the Spark tests need bindings/python/requirements-spark.txt "
                    "(scripts/python-env.sh installs it)")
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("no Java: the Spark tests need Java 17 (scripts/ensure-java.sh installs it)")
    from bertflow.spark import local_session

    session = local_session("local[2,2]", app_name="bertflow-tests", conf=SPARK_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


STSB_TEST_ROWS = 1000


@pytest.fixture(scope="session")
def stsb_test(data_dir, tmp_path_factory):
    """The first STSB_TEST_ROWS of the 2,551 distinct STS-B test sentences as
    a text file (one per line) and as Parquet (id, text), in the same order:
    more rows than the model's 384 dimensions (whitening is full rank), few
    enough to keep the default run short; the slow group runs Spark on every
    STS-B sentence (test_spark_encode.py)."""
    import bertflow

    sentences = bertflow.sts.tasks(data_dir, ["STS-B"])[0].sentences()
    assert len(sentences) == 2551
    sentences = sentences[:STSB_TEST_ROWS]
    return _write_corpus(tmp_path_factory.mktemp("stsb-test"), sentences)


def _write_corpus(folder, sentences):
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert all("\n" not in s and s.strip() for s in sentences)
    txt = folder / "sentences.txt"
    txt.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    pq.write_table(pa.table({"id": pa.array(range(len(sentences)), pa.int64()),
                             "text": sentences}), folder / "sentences.parquet")
    return {"sentences": sentences, "txt": txt, "parquet": folder / "sentences.parquet",
            "dir": folder}


@pytest.fixture(scope="session")
def cli_cache(tmp_path_factory):
    """`--cache-dir` arguments: an embedding cache private to this test run."""
    return ["--cache-dir", tmp_path_factory.mktemp("cli-cache")]


@pytest.fixture(scope="session")
def stsb_cli(stsb_test, run_cli, cli_cache):
    """`bertflow encode` of the STS-B test sentences (last-avg): (n, 384) float32."""
    out = stsb_test["dir"] / "cli.npy"
    run_cli("encode", "--model", MODEL, "--pooling", "last-avg",
            "--input", stsb_test["txt"], "--output", out, *cli_cache)
    return np.load(out)


def spark_vectors(df, col="embedding", id_col="id"):
    """(ids, vectors) of a DataFrame, sorted by id; null vectors as NaN rows."""
    t = df.select(id_col, col).toArrow()
    ids = np.asarray(t.column(id_col).to_numpy())
    vecs = t.column(col).to_pylist()
    order = np.argsort(ids, kind="stable")
    d = max((len(v) for v in vecs if v is not None), default=0)
    X = np.full((len(vecs), d), np.nan, dtype=np.float32)
    for i, v in enumerate(vecs):
        if v is not None:
            X[i] = v
    return ids[order], X[order]


@contextlib.contextmanager
def served(binary, *args):
    """`bertflow serve ARGS --port 0` from the repository root; yields its base
    URL once it listens, drains its request log, and checks that it stops
    cleanly on SIGTERM."""
    p = subprocess.Popen(
        [str(binary), "serve", *map(str, args), "--port", "0"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = None
    lines = []
    for line in p.stderr:
        lines.append(line)
        if "listening on http://" in line:
            url = line.strip().split("listening on ")[1]
            break
    if url is None:
        p.kill()
        pytest.fail("bertflow serve did not start:\n" + "".join(lines))
    # Keep draining stderr (request log lines) so the server never blocks on it.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    try:
        yield url
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0
