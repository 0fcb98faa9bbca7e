"""The command's direct Parquet writer: each task writes its own part file.

Spark's writer takes the vectors back from the Python worker into the JVM
(Arrow, then one row object per sentence), and encodes Parquet there: about a
tenth of a sentence's cost on one core (docs/spark.md). When the workers can
write where the driver commits (a local master and a local output path, or
``--writer direct`` on a cluster whose executors mount the output), the
encoder's own ``mapInArrow`` task writes its Arrow batches with pyarrow and
returns one small row (the part file's name and rows); the vectors never reach
the JVM.

The layout is Spark's (a folder of ``part-NNNNN-<job>.snappy.parquet`` and an
empty ``_SUCCESS``); the columns, types and order are the job's DataFrame's.
Commit: tasks write into a hidden staging folder beside the output (each
attempt under its own name, flushed to disk); the driver keeps the file of
each partition's successful attempt, writes ``_SUCCESS`` and renames the
folder into place. A failed job removes its staging folder and writes no
output (a killed driver leaves the hidden folder, never a partial output); with
``--overwrite`` the old output is moved aside before the new one is renamed in
and removed after, so a crash leaves the old or the new output, whole.
"""

import os
import uuid

from . import _worker

WRITERS = ("auto", "spark", "direct")


def local_path(path):
    """``path`` as a local file path (``file:`` stripped), or None when it
    names another file system (``hdfs://``, ``s3a://``, ...)."""
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" in path:
        return None
    return path


def data_files(folder):
    """The data files of a Parquet or text folder, sorted: every name but
    the hidden ones (``_SUCCESS``, ``.crc`` files, staging)."""
    return sorted(f for f in os.listdir(folder) if not f.startswith(("_", ".")))


def choose(writer, master, output):
    """Whether the command writes directly: ``direct`` (the output must be a
    local path), ``spark``, or ``auto``: direct for a local master and a local
    output path (the workers and the driver share the machine)."""
    if writer not in WRITERS:
        raise ValueError(f"bertflow.spark: --writer must be one of {', '.join(WRITERS)}")
    if writer == "spark":
        return False
    local = local_path(output) is not None
    if writer == "direct":
        if not local:
            raise ValueError(f"bertflow.spark: --writer direct needs a local or mounted "
                             f"output path, not {output}")
        return True
    return local and (master or "").startswith("local")


def write_batches(batches, inner, cfg, wcfg):
    """``mapInArrow`` body: runs ``_worker.<inner>(batches, cfg)`` and writes
    its batches into one Parquet file in the staging folder; yields one row
    (partition, file, rows). An empty partition writes nothing, except
    partition 0, which writes the schema (so an empty job has one file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    name = f"part-{part:05d}-{wcfg['job']}.snappy.parquet"
    tmp = os.path.join(wcfg["staging"], f".{name}.{attempt}-{uuid.uuid4().hex[:8]}")
    rows, writer, f = 0, None, None
    try:
        for batch in getattr(_worker, inner)(batches, cfg):
            if writer is None:
                f = open(tmp, "wb")
                writer = _parquet_writer(pq, f, batch.schema, wcfg["vector_cols"])
            writer.write_batch(batch)  # one row group per Arrow batch
            rows += batch.num_rows
        if writer is None and part == 0:
            schema = pa.ipc.read_schema(pa.py_buffer(wcfg["schema"]))
            f = open(tmp, "wb")
            writer = _parquet_writer(pq, f, schema, wcfg["vector_cols"])
        if writer is not None:
            writer.close()
            f.flush()
            os.fsync(f.fileno())
    finally:
        if f is not None:
            f.close()
    if writer is not None:
        # From buffers: pyarrow's from_pylist imports pandas (0.3 s at the end of
        # a worker's first task).
        yield _worker.one_row_batch(_written_schema(),
                                    [part, os.path.basename(tmp), name, rows])


def _parquet_writer(pq, f, schema, vector_cols):
    # Dictionary encoding of the vectors (every float distinct) is built and
    # dropped in every row group: off for them, on for the other columns.
    others = [n for n in schema.names if n not in vector_cols]
    return pq.ParquetWriter(f, schema, compression="snappy", use_dictionary=others or False,
                            write_statistics=others or False)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _written_schema():
    """The row each task returns to the driver (Arrow; Spark's type of it
    comes from this, not from DDL, whose parsing is a JVM call)."""
    import pyarrow as pa

    return pa.schema([("part", pa.int32()), ("file", pa.string()), ("name", pa.string()),
                      ("rows", pa.int64())])


def write(df, inner, cfg, spark_schema, output, *, overwrite=False, vector_cols=("embedding",)):
    """Runs ``_worker.<inner>`` over ``df`` in ``mapInArrow`` tasks that write
    ``output`` themselves (see the module's docstring); returns the rows
    written. ``spark_schema`` is the DataFrame schema ``inner`` yields."""
    import shutil

    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    from . import _in_worker

    out = os.path.abspath(local_path(output))
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"bertflow.spark: {output} exists (pass --overwrite to replace it)")
    job = uuid.uuid4().hex
    parent, base = os.path.split(out)
    os.makedirs(parent or ".", exist_ok=True)
    staging = os.path.join(parent, f".{base}.bertflow-{job[:12]}")
    os.mkdir(staging)
    wcfg = {"job": job, "staging": staging, "vector_cols": list(vector_cols),
            "schema": to_arrow_schema(spark_schema).serialize().to_pybytes()}
    try:
        written = df.mapInArrow(_in_worker("write_batches", inner, cfg, wcfg, module="_direct"),
                                from_arrow_schema(_written_schema())).collect()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    total = 0
    keep = set()
    for r in sorted(written, key=lambda r: r["part"]):
        os.replace(os.path.join(staging, r["file"]), os.path.join(staging, r["name"]))
        keep.add(r["name"])
        total += r["rows"]
    for leftover in os.listdir(staging):  # failed attempts' files
        if leftover not in keep:
            os.remove(os.path.join(staging, leftover))
    with open(os.path.join(staging, "_SUCCESS"), "wb") as f:
        os.fsync(f.fileno())
    _fsync_dir(staging)
    old = None
    if os.path.exists(out):
        old = os.path.join(parent, f".{base}.bertflow-old-{job[:12]}")
        os.replace(out, old)
    os.replace(staging, out)
    _fsync_dir(parent or ".")
    if old is not None:
        if os.path.isdir(old):
            shutil.rmtree(old)
        else:
            os.remove(old)
    return total

