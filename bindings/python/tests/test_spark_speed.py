"""What keeps `bertflow.spark` at the CLI's speed per core: one model load
per Python worker process (not per task), the encoder's threads per task,
no id job and no shuffle where the input does not need them."""

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertflow.spark as bs
from bertflow.spark import __main__ as command
from conftest import MODEL, spark_vectors

LINE = re.compile(r"task: pid (\d+) rows (\d+) .* threads (\d+) loads (\d+) ")


def _task_lines(path):
    return [tuple(map(int, m.groups())) for m in map(LINE.search, path.read_text().splitlines())
            if m]


def test_one_model_load_per_worker_process_and_the_threads_per_task(spark, stsb_test, tmp_path,
                                                                    monkeypatch):
    stats = tmp_path / "tasks.log"
    monkeypatch.setenv(bs.STATS_ENV, str(stats))
    df = spark.read.parquet(str(stsb_test["parquet"])).where("id < 300").repartition(6)
    # A token limit no other test uses: each worker's first task of this job loads it.
    ids, _ = spark_vectors(bs.encode(df, model=MODEL, max_len=77))
    assert len(ids) == 300
    tasks = _task_lines(stats)
    assert len(tasks) == 6 and sum(rows for _, rows, _, _ in tasks) == 300
    # spark.task.cpus (1) encoder threads in every task: 2 slots, 2 threads.
    assert all(threads == 1 for _, _, threads, _ in tasks)
    pids = {pid for pid, _, _, _ in tasks}
    assert len(pids) < len(tasks), "no Python worker ran two tasks (spark.python.worker.reuse)"
    for pid in pids:
        assert sum(loads for p, _, _, loads in tasks if p == pid) == 1, tasks

    # An explicit thread count reaches the encoder.
    stats.unlink()
    spark_vectors(bs.encode(df.limit(20).repartition(1), model=MODEL, max_len=77, threads=2))
    assert [t[2] for t in _task_lines(stats)] == [2]


def _jobs(spark):
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_ids_of_a_one_partition_input_need_no_job(spark, tmp_path):
    pq.write_table(pa.table({"text": [f"s{i}" for i in range(50)]}), tmp_path / "a.parquet")
    df = spark.read.parquet(str(tmp_path / "a.parquet"))
    assert command.input_partitions(df) == 1
    before = _jobs(spark)
    with_ids = command.add_ids(df, "id", 1)
    assert _jobs(spark) == before, "add_ids ran a job for a one-partition input"
    got = with_ids.repartition(3).toArrow().to_pylist()
    assert sorted(r["id"] for r in got) == list(range(50))
    assert all(r["text"] == f"s{r['id']}" for r in got)
    # Several partitions: one job counts their rows, ids follow partition order.
    (tmp_path / "many").mkdir()
    for i in range(3):
        pq.write_table(pa.table({"text": [f"p{i}-{j}" for j in range(10 + i)]}),
                       tmp_path / "many" / f"part-{i}.parquet")
    df = spark.read.parquet(str(tmp_path / "many"))
    n = command.input_partitions(df)
    assert n is not None and n > 1
    got = command.add_ids(df, "id", n).toArrow().to_pylist()
    assert sorted(r["id"] for r in got) == list(range(33))
    assert len({r["text"] for r in got}) == 33


@pytest.mark.parametrize("requested, cores, have, want", [
    (None, 1, 1, (None, None)),  # local[1], one input partition: no shuffle
    (None, 2, 1, (None, 2)),   # local[2], one partition: one task, 2 encoder threads
    (None, 4, 3, (4, None)),   # fewer partitions than cores: split, 1 thread per task
    (None, 2, 5, (None, None)),  # enough partitions already
    (None, 2, None, (2, None)),  # cannot tell (Spark Connect): split
    (None, None, 1, (None, None)),  # a cluster: the input's partitions
    (7, 2, 40, (7, None)),     # --partitions always wins
])
def test_plan_partitions(requested, cores, have, want):
    assert command.plan_partitions(requested, cores, have) == want


def test_one_small_file_is_one_partition_whatever_the_split_settings(tmp_path):
    """The command's guess of a one-partition input (the warm-up's thread
    count): one local file, or a folder of one data file, of 4 MiB or less."""
    small = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["x", "y"]}), small)
    assert command.one_small_file(str(small)) and command.one_small_file(f"file://{small}")
    spark_out = tmp_path / "spark-out"
    spark_out.mkdir()
    pq.write_table(pa.table({"text": ["x"]}), spark_out / "part-00000-a.snappy.parquet")
    for extra in ("_SUCCESS", ".part-00000-a.snappy.parquet.crc"):
        (spark_out / extra).write_bytes(b"")
    assert command.one_small_file(str(spark_out))
    pq.write_table(pa.table({"text": ["z"]}), spark_out / "part-00001-a.snappy.parquet")
    assert not command.one_small_file(str(spark_out))  # two files
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate((4 << 20) + 1)
    assert not command.one_small_file(str(big))
    assert not command.one_small_file(str(tmp_path / "missing.txt"))
    assert not command.one_small_file("hdfs://namenode/data/a.parquet")


def test_the_warm_up_task_reads_its_input_and_leaves_failures_to_the_job():
    """A Python worker that leaves its input unread is not reused (the next
    task would start a new one), and a model that fails to load is the
    encode job's error to report, not the warm-up's."""
    from bertflow.spark import _worker

    rows = iter(range(5))
    key = ("/no/such/model", None, None, 1, None, False)
    assert list(_worker.warm(rows, key)) == []
    assert next(rows, "done") == "done"
    assert not any(k[0] == "/no/such/model" for k in _worker._ENCODERS)


NO_PANDAS_TASK = """
import os, sys
import pyarrow as pa
from bertflow.spark import _direct, _worker
schema = pa.schema([("text", pa.string())])
batch = _worker.one_row_batch(schema, ["A man is playing a guitar."])
cfg = {"text_col": "text", "output_col": "embedding", "model": sys.argv[1], "pooling": None,
       "max_len": None, "batch_size": None, "empty": "error", "threads": 1,
       "calibrator": None, "allow_mismatch": False, "fail_once": None, "log_stats": None}
wcfg = {"job": "0" * 32, "staging": sys.argv[2], "vector_cols": ["embedding"],
        "schema": None}
out = list(_direct.write_batches(iter([batch]), "encode_batches", cfg, wcfg))
assert "pandas" not in sys.modules, "the task imported pandas"
row = out[0].to_pylist()[0]
assert row["part"] == 0 and row["rows"] == 1 and row["name"].startswith("part-00000-"), row
print(os.path.getsize(os.path.join(sys.argv[2], row["file"])))
"""


def test_a_direct_encode_task_imports_no_pandas(tmp_path):
    """pyarrow's ``pa.array`` and ``from_pylist`` import pandas (0.3 s at the
    end of a worker's first task); the encode-and-write task builds its
    arrays from buffers instead, up to the row it returns to the driver."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, BERTFLOW_SKLEARN="0")
    p = subprocess.run([sys.executable, "-c", NO_PANDAS_TASK, str(MODEL), str(tmp_path)],
                       env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    assert int(p.stdout.split()[-1]) > 384 * 4  # the part file holds the vector


def test_boolean_masks_from_bits():
    from bertflow.spark import _worker

    for n in (0, 1, 7, 8, 9, 65):
        mask = [(i * 7) % 3 == 0 for i in range(n)]
        assert _worker.bool_array(mask).to_pylist() == mask
