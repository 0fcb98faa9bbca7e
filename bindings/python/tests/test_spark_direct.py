"""The command's direct writer (bertflow.spark._direct): each encode task
writes its own Parquet part file; the output equals Spark's writer's (rows,
columns, types), is committed whole (`_SUCCESS`, no staging or failed
attempt's file left), replaces an old output only with `overwrite`, and every
reader of vectors takes it."""

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import bertflow
import bertflow.spark as bs
from bertflow.spark import _direct, _encode_plan, _transform_plan
from conftest import MODEL


def _plan(df):
    return _encode_plan(df, "text", model=MODEL, pooling="last-avg", output_col="embedding",
                        batch_size=None, max_len=None, empty="error", threads=None,
                        check_model=True, calibrator=None, allow_mismatch=False)


def _sorted(table):
    return table.take(np.argsort(table.column("id").to_numpy()))


@pytest.fixture(scope="module")
def small(spark, stsb_test):
    return spark.read.parquet(str(stsb_test["parquet"])).where("id < 300").repartition(3)


def test_direct_output_equals_sparks_writer(spark, small, tmp_path):
    n = _direct.write(small, "encode_batches", *_plan(small), str(tmp_path / "d"))
    assert n == 300
    bs.encode(small, model=MODEL, pooling="last-avg").write.parquet(str(tmp_path / "s"))
    names = sorted(os.listdir(tmp_path / "d"))
    assert names[0] == "_SUCCESS" and len(names) == 4
    assert all(n.startswith(f"part-0000{i}-") and n.endswith(".snappy.parquet")
               for i, n in enumerate(names[1:]))
    # Nothing else beside the output: the staging folder was renamed into place.
    assert sorted(os.listdir(tmp_path)) == ["d", "s"]
    d, s = _sorted(pq.read_table(tmp_path / "d")), _sorted(pq.read_table(tmp_path / "s"))
    assert d.column_names == s.column_names == ["id", "text", "embedding"]
    assert [f.type for f in d.schema] == [f.type for f in s.schema]
    assert d.column("text").equals(s.column("text"))
    Xd = np.array(d.column("embedding").to_pylist(), dtype=np.float32)
    Xs = np.array(s.column("embedding").to_pylist(), dtype=np.float32)
    assert Xd.shape == (300, 384) and np.array_equal(Xd, Xs)
    # Spark reads it back, and so does core's reader (part files in name order).
    assert spark.read.parquet(str(tmp_path / "d")).count() == 300
    X, texts = bertflow.read_vectors(tmp_path / "d")
    got = dict(zip(texts, X.tolist()))
    assert len(X) == 300 and all(np.array_equal(got[t], v) for t, v in
                                 zip(d.column("text").to_pylist(), Xd.tolist()))


def test_overwrite_empty_input_and_a_retried_task(spark, small, tmp_path, monkeypatch):
    out = str(tmp_path / "o")
    _direct.write(small, "encode_batches", *_plan(small), out)
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        _direct.write(small, "encode_batches", *_plan(small), out)
    # An empty job writes one schema-only part file (partition 0), as Spark does.
    empty = small.where("id < 0")
    assert _direct.write(empty, "encode_batches", *_plan(empty), out, overwrite=True) == 0
    t = pq.read_table(out)
    assert t.num_rows == 0 and t.column_names == ["id", "text", "embedding"]
    # One attempt fails after its first batch (its partial file is in staging);
    # Spark retries it; the commit keeps only successful attempts' files.
    marker = tmp_path / "fail-once"
    marker.write_text("armed")
    monkeypatch.setenv(bs.FAIL_ONCE_ENV, str(marker))
    calib = bertflow.Whitening().fit(np.random.default_rng(0).standard_normal((500, 384)))
    emb = bs.encode(small, model=MODEL, pooling="last-avg")
    cfg, schema = _transform_plan(emb, "embedding", calib, None)
    assert _direct.write(emb, "transform_batches", cfg, schema, out, overwrite=True) == 300
    assert (tmp_path / "fail-once.fired").exists(), "no failure fired"
    assert sorted(os.listdir(tmp_path)) == ["fail-once.fired", "o"]
    names = os.listdir(out)
    assert "_SUCCESS" in names and len(names) == 4 and not any(n.startswith(".") for n in names)
    t = _sorted(pq.read_table(out))
    assert t.column("id").to_pylist() == list(range(300))
    monkeypatch.delenv(bs.FAIL_ONCE_ENV)
    ref = _sorted(bs.transform(emb, "embedding", calib).toArrow())
    assert np.array_equal(np.array(t.column("embedding").to_pylist(), dtype=np.float32),
                          np.array(ref.column("embedding").to_pylist(), dtype=np.float32))


def test_choose_and_paths():
    assert _direct.choose("auto", "local[2]", "out/") is True
    assert _direct.choose("auto", "local[2]", "file:///tmp/out") is True
    assert _direct.choose("auto", "yarn", "/mnt/out") is False
    assert _direct.choose("auto", "local[2]", "hdfs://nn/out") is False
    assert _direct.choose("spark", "local[2]", "out/") is False
    assert _direct.choose("direct", "yarn", "/mnt/out") is True
    with pytest.raises(ValueError, match="needs a local or mounted output path"):
        _direct.choose("direct", "yarn", "s3a://bucket/out")
    with pytest.raises(ValueError, match="--writer must be one of auto, spark, direct"):
        _direct.choose("fast", "local", "out")
    assert _direct.local_path("file:/tmp/x") == "/tmp/x"
    from bertflow.spark import __main__ as command

    with pytest.raises(SystemExit, match="--writer direct needs a local or mounted output"):
        command.main(["--input", "x.txt", "--output", "hdfs://nn/o", "--writer", "direct"])
