"""`python -m bertflow.spark`: Parquet in, calibrated embeddings equal to the
CLI's out; text input with ids from the input order."""

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertflow
from bertflow.spark import __main__ as command
from conftest import MODEL, ROOT, spark_vectors


def test_command_on_parquet_equals_the_cli(stsb_test, stsb_cli, run_cli, cli_cache, tmp_path,
                                           spark):
    """A fresh process, as a new user runs it: Parquet without an id column,
    whitening fitted on the whole input, embeddings and file equal the CLI's."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": stsb_test["sentences"]}), src)
    out, saved = tmp_path / "out.parquet", tmp_path / "spark-whiten.safetensors"
    env = dict(os.environ, BERTFLOW_SPARK_STATS=str(tmp_path / "tasks.log"))
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        env.pop(k, None)  # the command sets them itself
    p = subprocess.run(
        [sys.executable, "-m", "bertflow.spark", "--input", str(src), "--output", str(out),
         "--model", str(MODEL), "--pooling", "last-avg", "--calibrate", "whiten",
         "--master", "local[2]", "--save-calibrator", str(saved)],
        cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"wrote {len(stsb_test['sentences'])} rows" in p.stderr
    # Spark's console progress bar is for a terminal, not a captured stderr.
    assert "[Stage " not in p.stderr, p.stderr[-3000:]
    # Nor Spark's notes on its default logging (bertflow's log4j2.properties).
    assert "log4j" not in p.stderr, p.stderr[-3000:]
    # One input file on local[2]: one encode task with 2 encoder threads (no shuffle),
    # in the Python worker that the warm-up job started and loaded the model into
    # while Spark SQL started (bertflow.spark.warm_worker): no load in the task.
    tasks = (tmp_path / "tasks.log").read_text().splitlines()
    assert len(tasks) == 1 and " threads 2 loads 0 " in tasks[0], tasks
    got = pq.read_table(out)
    assert sorted(got.column_names) == ["embedding", "id", "text"]
    order = np.argsort(got.column("id").to_numpy())
    ids = got.column("id").to_numpy()[order]
    texts = [got.column("text")[int(i)].as_py() for i in order]
    n = len(stsb_test["sentences"])
    assert (ids == np.arange(n)).all() and texts == stsb_test["sentences"]
    Z = np.array(got.column("embedding").to_pylist(), dtype=np.float32)[order]

    # The CLI: fit whitening on the same sentences, then encode through it.
    cli_file = tmp_path / "cli-whiten.safetensors"
    cache = cli_cache  # the STS-B test sentences are cached by the stsb_cli fixture
    run_cli("fit", "--model", MODEL, "--pooling", "last-avg", "--kind", "whiten",
            "--on", stsb_test["txt"], "--output", cli_file, *cache)
    run_cli("encode", "--model", MODEL, "--pooling", "last-avg", "--calibrator", cli_file,
            "--input", stsb_test["txt"], "--output", tmp_path / "cli.npy", *cache)
    assert np.abs(Z - np.load(tmp_path / "cli.npy")).max() <= 1e-5
    # Spark's file names the model and pooling: the CLI takes it as its own.
    meta = bertflow.load(saved).meta_
    assert meta["pooling"] == "last-avg" and meta["fit_corpus_size"] == n
    assert meta["model"] == bertflow.load(cli_file).meta_["model"]
    run_cli("encode", "--model", MODEL, "--pooling", "last-avg", "--calibrator", saved,
            "--input", stsb_test["txt"], "--output", tmp_path / "cli2.npy", *cache)
    assert np.abs(Z - np.load(tmp_path / "cli2.npy")).max() <= 1e-5


def test_text_input_gets_ids_from_the_input_order(spark, encoder, tmp_path):
    lines = [f"Sentence number {i} is about {w}." for i, w in
             enumerate(["cats", "dogs", "guitars", "rain", "trains"] * 7)]
    lines[11] = ""  # an empty line: dropped with --empty skip, its id is not reused
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.parquet"
    # In-process: main() uses the running session (as under spark-submit).
    assert command.main(["--input", str(src), "--output", str(out), "--model", str(MODEL),
                         "--empty", "skip", "--partitions", "3"]) == 0
    ids, X = spark_vectors(spark.read.parquet(str(out)))
    want = [i for i in range(len(lines)) if i != 11]
    assert list(ids) == want
    ref = encoder.encode([lines[i] for i in want])
    assert np.abs(X - ref).max() <= 1e-5
    # Without --empty the empty line is an error that names it.
    with pytest.raises(Exception, match=r"column 'text' at row \{id=11\}: empty text"):
        command.main(["--input", str(src), "--output", str(tmp_path / "o2.parquet"),
                      "--model", str(MODEL)])
    # An existing output is kept unless --overwrite.
    with pytest.raises(SystemExit, match="exists"):
        command.main(["--input", str(src), "--output", str(out), "--model", str(MODEL)])


def test_add_ids_counts_partitions(spark, tmp_path):
    pq.write_table(pa.table({"text": [f"s{i}" for i in range(50)]}), tmp_path / "a.parquet")
    df = spark.read.parquet(str(tmp_path / "a.parquet"))
    got = command.add_ids(df, "id").select("id", "text").toArrow().to_pylist()
    assert sorted(r["id"] for r in got) == list(range(50))
    assert all(r["text"] == f"s{r['id']}" for r in got)


def test_help_and_bad_spec():
    p = subprocess.run([sys.executable, "-m", "bertflow.spark", "--help"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "--calibrate SPEC" in p.stdout and "--master" in p.stdout
    with pytest.raises(ValueError, match="unknown kind"):
        command.main(["--input", "x.txt", "--output", "/nonexistent/o", "--calibrate", "whitening"])
    with pytest.raises(SystemExit, match="--save-calibrator needs --calibrate"):
        command.main(["--input", "x.txt", "--output", "/nonexistent/o", "--save-calibrator", "c"])


def test_local_parquet_schema_is_read_from_a_footer(tmp_path):
    from pyspark.sql import types as T

    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "text": ["a"],
                             "v": pa.array([[1.0]], pa.list_(pa.float32()))}), tmp_path / "a.parquet")
    want = T.StructType([T.StructField("id", T.LongType()), T.StructField("text", T.StringType()),
                         T.StructField("v", T.ArrayType(T.FloatType()))])
    assert command.local_parquet_schema(str(tmp_path / "a.parquet")) == want
    (tmp_path / "out").mkdir()
    pq.write_table(pq.read_table(tmp_path / "a.parquet"), tmp_path / "out" / "part-0.parquet")
    (tmp_path / "out" / "_SUCCESS").write_bytes(b"")
    assert command.local_parquet_schema(str(tmp_path / "out")) == want
    assert command.local_parquet_schema("file:" + str(tmp_path / "out")) == want
    # Spark decides: another file system, partition folders, a missing path.
    assert command.local_parquet_schema("hdfs://nn/x.parquet") is None
    (tmp_path / "out" / "year=2024").mkdir()
    assert command.local_parquet_schema(str(tmp_path / "out")) is None
    assert command.local_parquet_schema(str(tmp_path / "missing.parquet")) is None
