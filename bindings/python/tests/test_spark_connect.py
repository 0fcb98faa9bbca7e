"""bertflow.spark over Spark Connect: the same encode, fit and transform as on a
classic session, through a local Connect server (``local_session(...,
connect=True)``). It runs in its own interpreter: a process holds classic or
Connect sessions, not both, and the other Spark tests share a classic one.
In the slow group (``pytest -m slow``, scripts/slow-tests.sh): starting a
Connect server is a second JVM, the slowest minute and a half of the default
run, and the classic session's tests cover the same encode, fit and transform."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import pyarrow.parquet as pq

import bertflow

JOB = Path(__file__).with_name("spark_connect_job.py")


@pytest.mark.slow
def test_encode_fit_transform_over_spark_connect(stsb_test, encoder, model_dir, tmp_path):
    sentences = stsb_test["sentences"][:300]
    parquet = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": pa.array(range(len(sentences)), pa.int64()),
                             "text": sentences}), parquet)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    run = subprocess.run([sys.executable, str(JOB), str(parquet), str(model_dir), str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    info = json.loads(run.stdout.strip().splitlines()[-1])
    # A Connect client session, not a classic one.
    assert info == {"session": "pyspark.sql.connect.session", "rows": 300}
    assert (np.load(tmp_path / "ids.npy") == np.arange(300)).all()
    X = encoder.encode(sentences)
    assert np.abs(np.load(tmp_path / "x.npy") - X).max() <= 1e-6
    # The whitening fitted over Connect equals a one-shot fit on the same vectors,
    # and its transform column equals that fit's transform.
    w = bertflow.load(tmp_path / "w.safetensors")
    one_shot = bertflow.calibrator("whiten:k=64").fit(X)
    assert np.abs(w.transform(X) - one_shot.transform(X)).max() <= 1e-5
    assert np.abs(np.load(tmp_path / "z.npy") - one_shot.transform(X)).max() <= 1e-5
    # `python -m bertflow.spark` wrote the same rows (ids kept, calibrated vectors).
    t = pq.read_table(tmp_path / "command.parquet")
    ids = np.asarray(t.column("id").to_numpy())
    assert sorted(ids) == list(range(300))
    Z = np.asarray(t.column("embedding").to_pylist(), np.float32)[np.argsort(ids)]
    assert np.abs(Z - one_shot.transform(X)).max() <= 1e-5
