"""bertflow.spark.moment_stats / fit / transform on a local[2] session: the
same calibrators as the CLI whatever the partitioning, the flow's seeded
sample recorded in its file, and bad input."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertflow
import bertflow.spark as bs
from conftest import spark_vectors


@pytest.fixture(scope="module")
def vectors(stsb_test, stsb_cli):
    """The CLI's STS-B test embeddings as .npy and as Parquet (id, embedding)."""
    folder = stsb_test["dir"]
    npy = folder / "vectors.npy"
    np.save(npy, stsb_cli)
    n, d = stsb_cli.shape
    emb = pa.FixedSizeListArray.from_arrays(pa.array(stsb_cli.reshape(-1)), d)
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()),
                             "embedding": emb.cast(pa.list_(pa.float32()))}),
                   folder / "vectors.parquet")
    return {"X": stsb_cli, "npy": npy, "parquet": str(folder / "vectors.parquet")}


def read(spark, vectors, partitions):
    return spark.read.parquet(vectors["parquet"]).repartition(partitions)


def test_moment_stats_equal_numpy(spark, vectors):
    X = vectors["X"].astype(np.float64)
    s = bs.moment_stats(read(spark, vectors, 3))
    assert s.count == len(X) and s.dim == 384
    assert np.abs(s.mean - X.mean(axis=0)).max() < 1e-9
    assert np.abs(s.covariance() - np.cov(X, rowvar=False)).max() < 1e-9


@pytest.mark.parametrize("partitions", [1, 3, 16])
def test_whitening_equals_the_cli_fit(spark, vectors, run_cli, tmp_path, partitions):
    cli_file = tmp_path / "cli-whiten.safetensors"
    run_cli("fit", "--embeddings", vectors["npy"], "--kind", "whiten", "--output", cli_file)
    cli = bertflow.load(cli_file)
    df = read(spark, vectors, partitions)
    w = bs.fit(df, "embedding", "whiten")
    assert w.meta_["fit_corpus_size"] == len(vectors["X"]) and "sampled_from" not in w.meta_
    X = vectors["X"]
    assert np.abs(w.transform(X) - cli.transform(X)).max() <= 1e-5
    # Spark's transform of the column equals the CLI's transform of the file.
    run_cli("transform", "--calibrator", cli_file, "--input", vectors["npy"],
            "--output", tmp_path / "z.npy")
    ids, Z = spark_vectors(bs.transform(df, "embedding", w, output_col="z"), "z")
    assert (ids == np.arange(len(X))).all()
    assert np.abs(Z - np.load(tmp_path / "z.npy")).max() <= 1e-5


@pytest.mark.parametrize("spec", ["sn", "natsv:k=5", "sn+natsv:k=5", "whiten:k=128",
                                  "softwhiten:alpha=0.5,shrink=0.25,drop=2"])
def test_moment_kinds_equal_the_one_shot_fit(spark, vectors, spec):
    X = vectors["X"]
    c = bs.fit(read(spark, vectors, 3), "embedding", spec)
    ref = bertflow.calibrator(spec).fit(X)
    assert c.spec == ref.spec
    assert np.abs(c.transform(X) - ref.transform(X)).max() <= 1e-5


def test_flow_fits_on_a_seeded_sample_recorded_in_the_file(spark, vectors, run_cli, tmp_path):
    X = vectors["X"]
    spec = "flow:levels=2,steps=2,width=16,seed=7"
    one = bs.fit(read(spark, vectors, 1), "embedding", spec, sample_size=500)
    three = bs.fit(read(spark, vectors, 3), "embedding", spec, sample_size=500)
    assert one.meta_["fit_corpus_size"] == 500 and one.meta_["sampled_from"] == len(X)
    assert one.meta_["seed"] == 7
    # The sample is chosen by a hash of the vectors: the same whatever the partitioning.
    assert np.array_equal(one.transform(X), three.transform(X))
    # Another seed draws another sample (and initialises another flow).
    other = bs.fit(read(spark, vectors, 3), "embedding", spec.replace("seed=7", "seed=8"),
                   sample_size=500)
    assert not np.allclose(other.transform(X[:50]), one.transform(X[:50]))
    # The file keeps the sample size; the CLI applies it like Spark does.
    path = tmp_path / "flow.safetensors"
    one.save(path)
    again = bertflow.load(path)
    assert again.meta_["sampled_from"] == len(X) and again.meta_["fit_corpus_size"] == 500
    run_cli("transform", "--calibrator", path, "--input", vectors["npy"],
            "--output", tmp_path / "z.npy")
    ids, Z = spark_vectors(bs.transform(read(spark, vectors, 3), "embedding", path))
    assert np.abs(Z - np.load(tmp_path / "z.npy")).max() <= 1e-5


def test_auto_fits_on_the_sample_as_on_the_rows(spark, vectors):
    # auto is not a moment kind (the registry says so): it is fitted on the
    # seeded sample, here every row, and decides as on the matrix itself.
    X = vectors["X"]
    c = bs.fit(read(spark, vectors, 3), "embedding", "auto", sample_size=len(X) + 10)
    ref = bertflow.Auto().fit(X)
    assert c.meta_["fit_corpus_size"] == len(X) and "sampled_from" not in c.meta_
    assert c.decision_["action"] == ref.decision_["action"]
    assert np.abs(c.transform(X) - ref.transform(X)).max() <= 1e-4


def test_calibrate_help_lists_every_kind():
    help_text = bs.calibrate_help()
    for k in bertflow.kinds():
        assert k["synopsis"] in help_text, k["name"]


def test_flow_on_fewer_rows_than_the_sample_uses_every_row(spark, vectors):
    df = spark.read.parquet(vectors["parquet"]).where("id < 300")
    c = bs.fit(df, "embedding", "flow:levels=1,steps=1,width=8", sample_size=1000)
    assert c.meta_["fit_corpus_size"] == 300 and "sampled_from" not in c.meta_


def test_nulls_empty_partitions_and_bad_vectors(spark, tmp_path):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((20, 6)).astype(np.float32)
    rows = [list(map(float, x)) for x in X] + [None, None]
    pq.write_table(pa.table({"id": list(range(22)),
                             "v": pa.array(rows, pa.list_(pa.float32()))}), tmp_path / "v.parquet")
    from pyspark.sql import functions as F

    # Hash-partitioned on a constant: every row in one partition, 5 empty ones.
    df = spark.read.parquet(str(tmp_path / "v.parquet")).repartition(6, F.lit(1))
    s = bs.moment_stats(df, "v")
    assert s.count == 20  # null vectors left out
    c = bs.fit(df, "v", "whiten")
    ref = bertflow.Whitening().fit(X)
    assert np.abs(c.transform(X) - ref.transform(X)).max() <= 1e-5
    ids, Z = spark_vectors(bs.transform(df, "v", c), "v")
    assert list(ids) == list(range(22)) and np.isnan(Z[20:]).all()
    assert np.abs(Z[:20] - ref.transform(X)).max() <= 1e-5
    # No vector at all.
    with pytest.raises(ValueError, match="holds no vector"):
        bs.fit(df.where("id >= 20"), "v", "whiten")
    # Wrong dimension for the calibrator, and vectors of different lengths.
    other = bertflow.Whitening().fit(rng.standard_normal((20, 4)))
    with pytest.raises(Exception, match="6-dimensional vectors, the calibrator .* takes 4"):
        bs.transform(df, "v", other).collect()
    ragged = spark.createDataFrame([([1.0, 2.0],), ([1.0, 2.0, 3.0],)], "v array<float>")
    with pytest.raises(Exception, match="vectors of different lengths"):
        bs.moment_stats(ragged.coalesce(1), "v")
    with pytest.raises(TypeError, match="not an array column"):
        bs.fit(df, "id", "whiten")
    with pytest.raises(ValueError, match="unknown|kind"):
        bs.fit(df, "v", "whitening")
