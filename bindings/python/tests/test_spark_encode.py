"""bertflow.spark.encode on a local[2] session: equal to the CLI, rows kept,
retried after a worker failure, and null/empty texts, empty partitions and
bad arguments handled."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertflow
import bertflow.spark as bs
from conftest import MODEL, STSB_TEST_ROWS, _write_corpus, spark_vectors



@pytest.fixture(scope="module")
def spark_encoded(spark, stsb_test):
    """Spark's embeddings of the STS-B test sentences (conftest's), read from Parquet in 3
    partitions: (ids, vectors, row count)."""
    df = spark.read.parquet(str(stsb_test["parquet"])).repartition(3)
    out = bs.encode(df, "text", model=MODEL, pooling="last-avg")
    ids, X = spark_vectors(out)
    return ids, X


def test_encode_equals_cli(spark_encoded, stsb_test, stsb_cli):
    ids, X = spark_encoded
    n = len(stsb_test["sentences"])
    assert n == STSB_TEST_ROWS and stsb_cli.shape == (n, 384)
    # Every input row once, ids preserved.
    assert len(ids) == n and len(np.unique(ids)) == n
    assert (ids == np.arange(n)).all()
    assert X.dtype == np.float32 and X.shape == stsb_cli.shape
    assert np.abs(X - stsb_cli).max() <= 1e-5


def test_other_columns_pass_through(spark, stsb_test):
    df = spark.read.parquet(str(stsb_test["parquet"])).limit(40)
    out = bs.encode(df, model=MODEL, output_col="vec").toArrow()
    assert out.column_names == ["id", "text", "vec"]
    got = dict(zip(out.column("id").to_pylist(), out.column("text").to_pylist()))
    assert got == {i: stsb_test["sentences"][i] for i in got} and len(got) == 40


def test_worker_failure_is_retried_with_identical_output(spark, stsb_test, spark_encoded,
                                                         tmp_path, monkeypatch):
    # One task attempt (whichever comes first) raises after its first Arrow
    # batch; Spark retries it (local[2,2]) and the output is complete.
    marker = tmp_path / "fail-once"
    marker.write_text("armed")
    monkeypatch.setenv(bs.FAIL_ONCE_ENV, str(marker))
    df = spark.read.parquet(str(stsb_test["parquet"])).where("id < 600").repartition(3)
    ids, X = spark_vectors(bs.encode(df, model=MODEL))
    assert not marker.exists() and (tmp_path / "fail-once.fired").exists(), "no failure fired"
    assert (ids == np.arange(600)).all()
    ref_ids, ref = spark_encoded
    assert np.array_equal(X, ref[:600])


def test_null_and_empty_texts(spark, encoder, tmp_path):
    texts = ["A man is playing a guitar.", None, "", "   ", "The cat sits on the mat."]
    pq.write_table(pa.table({"id": list(range(5)), "text": pa.array(texts, pa.string())}),
                   tmp_path / "t.parquet")
    df = spark.read.parquet(str(tmp_path / "t.parquet")).coalesce(1)
    # Default: the CLI's rule, an empty text is an error naming the row.
    with pytest.raises(Exception, match=r"column 'text' at row \{id=2\}: empty text; `skip` drops"):
        bs.encode(df, model=MODEL).collect()
    # keep: embedded as the empty sentence; null: a null vector.
    ids, X = spark_vectors(bs.encode(df, model=MODEL, empty="keep"))
    assert list(ids) == [0, 1, 2, 3, 4]
    assert np.isnan(X[1]).all() and not np.isnan(np.delete(X, 1, axis=0)).any()
    ref = encoder.encode(["A man is playing a guitar.", "", "   ", "The cat sits on the mat."])
    assert np.abs(np.delete(X, 1, axis=0) - ref).max() <= 1e-5
    # skip: empty rows dropped (as `bertflow encode --empty skip`), null kept.
    ids, X = spark_vectors(bs.encode(df, model=MODEL, empty="skip"))
    assert list(ids) == [0, 1, 4] and np.isnan(X[1]).all()
    assert np.abs(X[[0, 2]] - ref[[0, 3]]).max() <= 1e-5


def test_empty_partitions(spark, stsb_test, encoder):
    df = spark.read.parquet(str(stsb_test["parquet"])).where("id < 5").repartition(12)
    ids, X = spark_vectors(bs.encode(df, model=MODEL))
    assert list(ids) == [0, 1, 2, 3, 4]
    ref = encoder.encode(stsb_test["sentences"][:5])
    assert np.abs(X - ref).max() <= 1e-5
    # A DataFrame with no rows at all encodes to no rows.
    assert bs.encode(df.where("id < 0"), model=MODEL).count() == 0


def test_missing_model_fails_clearly(spark, stsb_test, tmp_path):
    df = spark.read.parquet(str(stsb_test["parquet"])).limit(3)
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bs.encode(df, model=missing)
    # Unchecked on the driver: the executors fail, naming the model and the fix.
    with pytest.raises(Exception, match="cannot load the model .*no-such-model"):
        bs.encode(df, model=str(missing), check_model=False).collect()


def test_bad_arguments(spark, stsb_test):
    df = spark.read.parquet(str(stsb_test["parquet"])).limit(3)
    with pytest.raises(ValueError, match="no column 'sentence'"):
        bs.encode(df, "sentence", model=MODEL)
    with pytest.raises(TypeError, match="'id' is bigint, not a string column"):
        bs.encode(df, "id", model=MODEL)
    with pytest.raises(ValueError, match="exists already"):
        bs.encode(df, model=MODEL, output_col="id")
    with pytest.raises(ValueError, match="empty: must be one of error, skip, keep"):
        bs.encode(df, model=MODEL, empty="drop")
    # Checked where the model loads: the job fails with the encoder's message.
    with pytest.raises(Exception, match="unknown pooling 'mean-of-nothing'; valid: cls"):
        bs.encode(df, model=MODEL, pooling="mean-of-nothing").collect()


@pytest.mark.slow
def test_encode_equals_cli_on_every_stsb_sentence(spark, data_dir, tmp_path, run_cli):
    """All 15,455 distinct STS-B sentences (train, dev and test)."""
    sentences = bertflow.sts.tasks(data_dir, ["STS-B"])[0].fit_sentences()
    corpus = _write_corpus(tmp_path, sentences)
    run_cli("encode", "--no-cache", "--model", MODEL, "--input", corpus["txt"],
            "--output", tmp_path / "cli.npy")
    cli = np.load(tmp_path / "cli.npy")
    df = spark.read.parquet(str(corpus["parquet"])).repartition(4)
    ids, X = spark_vectors(bs.encode(df, model=MODEL))
    assert (ids == np.arange(len(sentences))).all()
    assert np.abs(X - cli).max() <= 1e-5


def test_model_shipped_with_addfile(spark, stsb_test, encoder):
    """ship_model: SparkContext.addFile(model dir, recursive=True); the executors
    resolve "sparkfiles:NAME" with SparkFiles.get."""
    name = bs.ship_model(spark, MODEL)
    assert name == "sparkfiles:all-MiniLM-L6-v2"
    df = spark.read.parquet(str(stsb_test["parquet"])).where("id < 4")
    ids, X = spark_vectors(bs.encode(df, model=name))
    assert list(ids) == [0, 1, 2, 3]
    assert np.abs(X - encoder.encode(stsb_test["sentences"][:4])).max() <= 1e-5
