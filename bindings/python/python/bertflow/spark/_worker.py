"""The functions that run inside Spark's Python workers (``mapInArrow``).

Everything here is called on the executors with Arrow record batches in and
out. Nothing native is created on the driver and shipped: Spark's daemon
forks the Python workers, each worker unpickles the mapped function (which
imports bertflow there, after the fork) and creates its encoder or calibrator
inside the function, with its thread count set to ``spark.task.cpus``; a Rust
thread pool created before a fork would be unusable in the child. Models and
calibrators are cached per worker process (Python workers are reused between
tasks), so a model is loaded once per worker, not once per task or batch.
"""

import hashlib
import os
import socket
import time

from .. import _bertflow

#: Loaded encoders and calibrators of this worker process.
_ENCODERS = {}
_CALIBRATORS = {}

#: Models this worker process has loaded (``BERTFLOW_SPARK_STATS`` reports it:
#: one per process, however many tasks the process runs).
LOADS = [0]

#: The prefix of a model shipped with ``SparkContext.addFile`` (see
#: :func:`bertflow.spark.ship_model`).
SPARKFILES = "sparkfiles:"

#: The empty-text rules (core's, as the CLI's ``--empty`` takes them).
EMPTY_RULES = tuple(_bertflow.EMPTY_RULES)


def _vector_type():
    import pyarrow as pa

    return pa.list_(pa.float32())


def resolve_model(model):
    """The local path of ``model`` on this executor: a ``sparkfiles:NAME``
    model is looked up with ``SparkFiles.get``; anything else is as given."""
    if model.startswith(SPARKFILES):
        from pyspark import SparkFiles

        return SparkFiles.get(model[len(SPARKFILES):])
    return model


def encoder(model, pooling, max_len, threads, calibrator_bytes=None, allow_mismatch=False):
    """The worker's encoder for these arguments (loaded on first use); with a
    calibrator file's bytes, the pipeline applies it (core's checks of model,
    pooling and weighting run here, as for the CLI's ``--calibrator``)."""
    digest = hashlib.sha256(calibrator_bytes).hexdigest() if calibrator_bytes else None
    key = (model, pooling, max_len, threads, digest, allow_mismatch)
    enc = _ENCODERS.get(key)
    if enc is None:
        import bertflow

        path = resolve_model(model)
        cal = calibrator(calibrator_bytes) if calibrator_bytes else None
        try:
            enc = bertflow.Encoder(path, pooling=pooling, max_len=max_len, threads=threads,
                                   cache=False, calibrator=cal, allow_mismatch=allow_mismatch)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"bertflow.spark: cannot load the model {model!r} on executor "
                f"{socket.gethostname()} (looked at {path!r}): {e}. The model directory must "
                "be readable at the same path on every executor (a shared file system or "
                "the cluster image), or shipped with bertflow.spark.ship_model"
            ) from None
        _ENCODERS[key] = enc
        LOADS[0] += 1
    return enc


def warm(rows, key):
    """Body of :func:`bertflow.spark.warm_worker`'s task: loads the encoder
    for ``key`` (:func:`encoder`'s arguments) into this worker's cache and
    reads the task's input to its end (a worker that leaves input unread is
    not reused). Yields nothing; a failure to load is the real job's to
    report."""
    try:
        encoder(*key)
    except Exception:  # noqa: BLE001 - the job that needs the model reports it
        pass
    for _ in rows:
        pass
    return iter(())


def calibrator(data):
    """The worker's calibrator for these file bytes (parsed on first use)."""
    key = hashlib.sha256(data).hexdigest()
    c = _CALIBRATORS.get(key)
    if c is None:
        import bertflow

        c = bertflow.Calibrator.from_bytes(data)
        _CALIBRATORS[key] = c
    return c


def maybe_fail(marker):
    """Fault injection for tests: when ``marker`` names an existing file, the
    first task to get here renames it to ``marker + ".fired"`` and raises, so
    exactly one task attempt fails (Spark retries it)."""
    if not marker:
        return
    try:
        os.rename(marker, marker + ".fired")
    except OSError:
        return  # not armed, or another task took it
    raise RuntimeError(f"bertflow.spark: injected failure ({marker})")


def _describe_row(batch, i, skip):
    """The other columns of row ``i`` (short), to name a failing row."""
    row = batch.slice(i, 1).to_pylist()[0]
    items = [f"{k}={v!r}"[:60] for k, v in row.items() if k != skip][:4]
    return "{" + ", ".join(items) + "}"


def valid_rows(col):
    """The boolean mask of the non-null rows of an Arrow array, from its
    validity bitmap. (Not ``is_valid().to_numpy()``: pyarrow's conversions to
    and from numpy import pandas, a second or more in every worker.)"""
    import numpy as np

    n = len(col)
    if col.null_count == 0:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(col.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[col.offset:col.offset + n].astype(bool)


def bool_array(mask):
    """An Arrow boolean array of ``mask``, built from its bits (see
    :func:`valid_rows`: ``pa.array`` imports pandas)."""
    import numpy as np
    import pyarrow as pa

    mask = np.asarray(mask, dtype=bool)
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, bits])


def one_row_batch(schema, values):
    """A one-row Arrow record batch of ``values`` (int, or str) under
    ``schema`` (integer and string fields), built from buffers (see
    :func:`valid_rows`: ``pa.array`` and ``from_pylist`` import pandas)."""
    import numpy as np
    import pyarrow as pa

    cols = []
    for field, v in zip(schema, values):
        if pa.types.is_string(field.type):
            data = v.encode("utf-8")
            offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int32))
            cols.append(pa.Array.from_buffers(field.type, 1, [None, offsets, pa.py_buffer(data)]))
        else:
            value = np.array([v], dtype=field.type.to_pandas_dtype())
            cols.append(pa.Array.from_buffers(field.type, 1, [None, pa.py_buffer(value)]))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def vectors_array(X, present, n):
    """An Arrow ``list<float>`` array of ``n`` rows: the rows of float32 ``X``
    where ``present`` is true, null elsewhere. Built from buffers, without a
    copy of ``X`` and without pyarrow's numpy conversions (see
    :func:`valid_rows`)."""
    import numpy as np
    import pyarrow as pa

    present = np.asarray(present, dtype=bool)
    d = X.shape[1] if X.ndim == 2 else 0
    sizes = np.where(present, d, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)  # int32 in the array: a batch is < 2^31 floats
    np.cumsum(sizes, out=offsets[1:])
    flat = np.ascontiguousarray(X, dtype=np.float32).reshape(-1)
    values = pa.Array.from_buffers(pa.float32(), flat.size, [None, pa.py_buffer(flat)])
    nulls = n - int(present.sum())
    mask = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(_vector_type(), n,
                                 [mask, pa.py_buffer(offsets.astype(np.int32))],
                                 null_count=nulls, children=[values])


def codes_array(C, present, n):
    """An Arrow ``binary`` array of ``n`` rows: each row of the code matrix
    ``C`` as its bytes (int8 codes as their two's-complement bytes) where
    ``present`` is true, null elsewhere."""
    import numpy as np
    import pyarrow as pa

    rows = iter(np.ascontiguousarray(C).view(np.uint8))
    return pa.array([next(rows).tobytes() if p else None for p in present], type=pa.binary())


def matrix(column, name):
    """The non-null rows of an Arrow list column as an ``(n, d)`` float32
    matrix, and the boolean mask of the non-null rows."""
    import numpy as np
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    present = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rows = column.filter(pa.array(present)) if not present.all() else column
    n = len(rows)
    if n == 0:
        return np.zeros((0, 0), dtype=np.float32), present
    lengths = rows.value_lengths().to_numpy(zero_copy_only=False)
    d = int(lengths[0])
    if (lengths != d).any():
        bad = int(np.flatnonzero(lengths != d)[0])
        raise ValueError(
            f"bertflow.spark: column {name!r} holds vectors of different lengths "
            f"({d} and {int(lengths[bad])})")
    flat = rows.flatten()
    if flat.null_count:
        raise ValueError(f"bertflow.spark: column {name!r} holds null elements inside a vector")
    values = flat.to_numpy(zero_copy_only=False)
    if values.dtype != np.float32 and values.dtype != np.float64:
        values = values.astype(np.float64)
    return values.reshape(n, d), present


def encode_batches(batches, cfg):
    """``mapInArrow`` body of :func:`bertflow.spark.encode`: appends the
    embedding column to every batch."""
    import numpy as np
    import pyarrow as pa

    enc = None
    field = pa.field(cfg["output_col"], _vector_type())
    clock = {"load": 0.0, "encode": 0.0, "rows": 0, "start": time.perf_counter(),
             "age": _process_age(), "loads0": LOADS[0]}
    for k, batch in enumerate(batches):
        name = cfg["text_col"]
        col = batch.column(name)
        # Core's empty-text rule (the CLI's --empty): which rows stay.
        texts = col.to_pylist()
        keep = np.asarray(_bertflow.keep_rows(
            texts, cfg["empty"],
            lambda i, b=batch: f"bertflow.spark: column {name!r} at row "
            f"{_describe_row(b, i, name)}"), dtype=bool)
        if not keep.all():
            batch = batch.filter(bool_array(keep))
            col = batch.column(name)
            texts = [t for t, k in zip(texts, keep) if k]
        present = valid_rows(col)
        if not present.all():
            texts = [t for t in texts if t is not None]
        if texts:
            if enc is None:
                t = time.perf_counter()
                enc = encoder(cfg["model"], cfg["pooling"], cfg["max_len"], cfg["threads"],
                              cfg.get("calibrator"), cfg.get("allow_mismatch", False))
                clock["load"] += time.perf_counter() - t
                clock["threads"] = enc.threads
            t = time.perf_counter()
            X = enc.encode(texts, batch_size=cfg["batch_size"])
            clock["encode"] += time.perf_counter() - t
            clock["rows"] += len(texts)
        else:
            X = np.zeros((0, 0), dtype=np.float32)
        out = vectors_array(X, present, batch.num_rows)
        yield pa.RecordBatch.from_arrays(list(batch.columns) + [out],
                                         schema=batch.schema.append(field))
        if k == 0:
            maybe_fail(cfg.get("fail_once"))
    if cfg.get("log_stats"):
        log_task(clock, cfg["log_stats"])


def _process_age():
    """Seconds since this worker process started (its fork and imports, at the
    first task), from /proc; -1 where there is no /proc."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            now = float(f.read().split()[0])
        return now - start / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return -1.0


def log_task(clock, where):
    """One line per task (``BERTFLOW_SPARK_STATS``, for benchmarks and tests)
    on the executor's stderr (``1``) or appended to the file ``where`` names:
    the worker's pid and age at the task's start (its fork and imports, for
    its first task), model load and encode seconds, rows, the encoder's
    threads, the models the task loaded (0 when its process had the model
    already), the process's OS threads, whether it imported pandas, and its
    peak RSS."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = time.perf_counter() - clock["start"]
    try:
        with open("/proc/self/status") as f:
            os_threads = next(int(x.split()[1]) for x in f if x.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        os_threads = -1
    line = (f"bertflow.spark task: pid {os.getpid()} rows {clock['rows']} age_s "
            f"{clock['age']:.2f} load_s {clock['load']:.2f} encode_s {clock['encode']:.2f} "
            f"task_s {total:.2f} threads {clock.get('threads', 0)} loads "
            f"{LOADS[0] - clock['loads0']} os_threads {os_threads} pandas "
            f"{int('pandas' in sys.modules)} peak_rss_mb {rss:.0f}\n")
    if where == "1":
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    # One short append per line: lines of concurrent workers do not interleave.
    fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def stats_batches(batches, col):
    """``mapInArrow`` body of the first level of
    :func:`bertflow.spark.moment_stats`: one row (count, dim, statistics
    bytes) per non-empty partition; null vectors are left out."""
    stats = None
    for batch in batches:
        X, _ = matrix(batch.column(col), col)
        if X.shape[0] == 0:
            continue
        if stats is None:
            import bertflow

            stats = bertflow.MomentStats(X.shape[1])
        stats.update(X)
    if stats is not None:
        yield _stats_batch([stats])


def _stats_batch(stats):
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "count": pa.array([s.count for s in stats], pa.int64()),
        "dim": pa.array([s.dim for s in stats], pa.int32()),
        "stats": pa.array([s.to_bytes() for s in stats], pa.binary()),
    })


def merge_stats(rows):
    """Merges (count, dim, stats) rows into one MomentStats (None for none)."""
    import bertflow

    total = None
    for data in rows:
        s = bertflow.MomentStats.from_bytes(data)
        if total is None:
            total = s
        elif s.dim != total.dim:
            raise ValueError(
                f"bertflow.spark: vectors of different dimensions ({total.dim} and {s.dim})")
        else:
            total.merge(s)
    return total


def merge_batches(batches):
    """``mapInArrow`` body of the second level of the tree aggregation: the
    partial statistics of a partition merged into one row."""
    total = merge_stats(data for b in batches for data in b.column("stats").to_pylist())
    if total is not None:
        yield _stats_batch([total])


def transform_batches(batches, cfg):
    """``mapInArrow`` body of :func:`bertflow.spark.transform`."""
    import numpy as np
    import pyarrow as pa

    c = calibrator(cfg["calibrator"])
    codes = cfg.get("codes", False)
    field = pa.field(cfg["output_col"], pa.binary() if codes else _vector_type())
    for k, batch in enumerate(batches):
        X, present = matrix(batch.column(cfg["col"]), cfg["col"])
        if X.shape[0]:
            if X.shape[1] != c.n_features_in_:
                raise ValueError(
                    f"bertflow.spark: column {cfg['col']!r} holds {X.shape[1]}-dimensional "
                    f"vectors, the calibrator ({c.describe()}) takes {c.n_features_in_}")
            Y = c.transform(X, quantize=True) if codes else c.transform(X)
        else:
            Y = np.zeros((0, 0), dtype=np.uint8 if codes else np.float32)
        if codes:
            out = codes_array(Y, present, batch.num_rows)
        else:
            out = vectors_array(Y, present, batch.num_rows)
        names = batch.schema.names
        if cfg["output_col"] in names:
            i = names.index(cfg["output_col"])
            cols = list(batch.columns)
            cols[i] = out
            schema = batch.schema.set(i, field)
        else:
            cols = list(batch.columns) + [out]
            schema = batch.schema.append(field)
        yield pa.RecordBatch.from_arrays(cols, schema=schema)
        if k == 0:
            maybe_fail(cfg.get("fail_once"))
