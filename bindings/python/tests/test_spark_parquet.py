"""Spark's own Parquet output, written here by PySpark itself, read by every
reader of vectors: `bertflow index build --vectors`, `fit --embeddings`,
`transform` and `bertflow.read_vectors` (issue 47). Spark writes a folder of
part files with `_SUCCESS` under the root `spark_schema`, required or optional
columns in the DataFrame's order, snappy by default; the pyarrow-written
fixtures of crates/core/tests/fixtures/parquet are read by the Rust tests."""

import os
import subprocess
import sys

import numpy as np
import pytest

import bertflow
from conftest import MODEL, ROOT, SENTENCES


def _types():
    from pyspark.sql import types as T

    return T


def _write(spark, path, X, texts, *, item="float", required=False, order=("text", "id", "emb"),
           codec="snappy", vector_col="embedding", parts=3):
    """X and texts as Spark writes them: `parts` part files in row order."""
    T = _types()
    elem = T.FloatType() if item == "float" else T.DoubleType()
    fields = {
        "text": T.StructField("text", T.StringType(), not required),
        "id": T.StructField("id", T.LongType(), False),
        "emb": T.StructField(vector_col, T.ArrayType(elem, not required), not required),
    }
    values = {"text": list(texts), "id": list(range(len(texts))),
              "emb": [[float(v) for v in row] for row in X]}
    rows = list(zip(*(values[k] for k in order)))
    schema = T.StructType([fields[k] for k in order])
    # createDataFrame from a list slices it in order: part i holds slice i.
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, parts), schema)
    df.write.mode("overwrite").option("compression", codec).parquet(str(path))
    names = sorted(os.listdir(path))
    assert "_SUCCESS" in names and sum(n.endswith(".parquet") for n in names) == parts
    return path


@pytest.fixture(scope="module")
def vectors():
    X = np.random.default_rng(47).standard_normal((40, 384)).astype(np.float32)
    X[:, :8] *= 5  # anisotropic: whitening has something to do
    return X, [f"sentence {i}" for i in range(len(X))]


SHAPES = {
    "float-optional-snappy": {},
    "double-required-zstd": {"item": "double", "required": True, "codec": "zstd",
                             "order": ("emb", "id", "text")},
    "float-reordered-uncompressed": {"order": ("id", "emb", "text"), "codec": "none",
                                     "parts": 1},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_reader_takes_what_spark_writes(spark, run_cli, vectors, tmp_path, shape):
    X, texts = vectors
    out = _write(spark, tmp_path / "out.parquet", X, texts, **SHAPES[shape])
    np.save(tmp_path / "x.npy", X)

    # bertflow.read_vectors: the vectors and sentences in part-file order.
    got, got_texts = bertflow.read_vectors(out)
    assert got.dtype == np.float32 and np.array_equal(got, X) and got_texts == texts
    got, none = bertflow.read_vectors(out, text_column=None)
    assert np.array_equal(got, X) and none is None

    # fit --embeddings: the same calibrator, input fingerprint included, as on the .npy.
    run_cli("fit", "--embeddings", out, "--kind", "whiten", "--output", tmp_path / "p.safetensors")
    run_cli("fit", "--embeddings", tmp_path / "x.npy", "--kind", "whiten",
            "--output", tmp_path / "n.safetensors")
    p, n = bertflow.load(tmp_path / "p.safetensors"), bertflow.load(tmp_path / "n.safetensors")
    assert p.meta_["model"] == n.meta_["model"]  # "external embeddings (<fingerprint>)"
    assert np.array_equal(p.transform(X), n.transform(X))

    # transform: chunk by chunk into .npy, as from the .npy.
    run_cli("transform", "--calibrator", tmp_path / "n.safetensors", "--input", out,
            "--output", tmp_path / "z.npy")
    assert np.allclose(np.load(tmp_path / "z.npy"), n.transform(X), atol=1e-6)

    # index build --vectors (the model's dimension, 384), with and without codes.
    for extra in ([], ["--quantize", "binary:itq=true"]):
        idx = tmp_path / "v.bfi"
        run_cli("index", "build", "--vectors", out, "--output", idx, "--pooling", "last-avg",
                *extra)
        index = bertflow.Index.open(idx)
        assert len(index) == len(X) and index.text(7) == texts[7]
        _, ids = index.search(X[[3, 11]], k=1)
        assert ids[:, 0].tolist() == [3, 11]
        os.remove(idx)


def test_a_spark_parquet_without_the_column_names_the_columns_it_has(spark, run_cli, vectors,
                                                                     tmp_path):
    X, texts = vectors
    out = _write(spark, tmp_path / "out.parquet", X[:5], texts[:5], vector_col="vec")
    np.save(tmp_path / "x.npy", X)
    cal = tmp_path / "c.safetensors"
    run_cli("fit", "--embeddings", tmp_path / "x.npy", "--kind", "sn", "--output", cal)
    for args in (["index", "build", "--vectors", out, "--output", tmp_path / "i.bfi"],
                 ["fit", "--embeddings", out, "--kind", "sn", "--output", tmp_path / "d.safetensors"],
                 ["transform", "--calibrator", cal, "--input", out, "--output", tmp_path / "z.npy"]):
        p = run_cli(*args, check=False)
        assert p.returncode != 0, args
        assert 'no column "embedding" (columns: text, id, vec)' in p.stderr, p.stderr
    with pytest.raises(ValueError, match=r'no column "embedding" \(columns: text, id, vec\)'):
        bertflow.read_vectors(out)
    assert not (tmp_path / "i.bfi").exists()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_commands_schema_read_takes_what_spark_writes(spark, vectors, tmp_path, shape):
    """The command reads a local Parquet input's schema from one footer (no
    discovery job): on Spark's own folders (part files, `_SUCCESS`, `.crc`
    files) it gives the columns and types Spark's discovery gives."""
    from bertflow.spark import __main__ as command

    X, texts = vectors
    out = _write(spark, tmp_path / "out.parquet", X, texts, **SHAPES[shape])
    assert any(n.endswith(".crc") for n in os.listdir(out))  # Spark's checksum files
    got = command.local_parquet_schema(str(out))
    want = spark.read.parquet(str(out)).schema
    assert [(f.name, f.dataType) for f in got] == [(f.name, f.dataType) for f in want]


def _command(*args):
    env = dict(os.environ)
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        env.pop(k, None)  # the command sets them itself
    p = subprocess.run([sys.executable, "-m", "bertflow.spark", *map(str, args)], cwd=ROOT,
                       env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_the_readme_flow_then_index_build_and_the_one_job_index(spark, run_cli, encoder,
                                                                tmp_path):
    """The README's Spark block (a text file in, `local[2]`), then `bertflow
    index build --vectors` on its output; and the same corpus to an index in
    one job (`--index`), which records the model, pooling and calibrator as
    `index build` does."""
    src = tmp_path / "sentences.txt"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    out = tmp_path / "emb.parquet"
    _command("--input", src, "--output", out, "--model", MODEL, "--pooling", "last-avg",
             "--master", "local[2]", "--calibrate", "whiten",
             "--save-calibrator", tmp_path / "w.safetensors",
             "--index", tmp_path / "one.bfi", "--quantize", "int8")
    # Two steps: the CLI indexes the job's output with the job's calibrator.
    two = tmp_path / "two.bfi"
    run_cli("index", "build", "--vectors", out, "--output", two, "--model", MODEL,
            "--pooling", "last-avg", "--calibrator", tmp_path / "w.safetensors",
            "--quantize", "binary:itq=true")
    white = bertflow.Encoder(MODEL, pooling="last-avg", cache=False,
                             calibrator=tmp_path / "w.safetensors")
    for path, quantizer in ((two, "binary:itq=true"), (tmp_path / "one.bfi", "int8")):
        index = bertflow.Index.open(path, encoder=white)  # checks model, pooling, calibrator
        assert len(index) == len(SENTENCES) and index.quantizer == quantizer
        assert sorted(index.text(i) for i in range(len(index))) == sorted(SENTENCES)
        _, ids, found = index.search(["A man is playing a guitar."], k=1, return_texts=True)
        assert found[0][0] == "A man is playing a guitar."
    # An uncalibrated index does not take the calibrated encoder's queries.
    with pytest.raises(Exception, match="calibrator: index .* vs now none"):
        bertflow.Index.open(tmp_path / "one.bfi", encoder=encoder)
