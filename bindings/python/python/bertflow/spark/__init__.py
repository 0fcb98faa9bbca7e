"""bertflow on Apache Spark: encode and calibrate a corpus of any size.

Orchestration only, over the same Rust library as everything else: the
executors run :class:`bertflow.Encoder`, :class:`bertflow.MomentStats` and the
calibrators inside ``mapInArrow``; the driver merges statistics and fits.
Only the DataFrame API is used (no RDD, no broadcast), so the same code runs
on a local session, on a cluster under ``spark-submit``, and over Spark
Connect.

- :func:`encode` adds an ``array<float>`` embedding column;
- :func:`moment_stats` merges per-partition statistics in a tree (vectors
  never reach the driver);
- :func:`fit` fits ``whiten``, ``sn``, ``natsv``, ``sn+natsv`` exactly from
  those statistics, and ``flow`` on a seeded sample collected to the driver;
- :func:`transform` applies a fitted calibrator, shipped to the executors as
  the calibrator file's bytes inside the mapped function.

Needs the ``spark`` extra (``pip install bertflow[spark]``: pyspark 4,
pyarrow, pandas) and Java 17. ``python -m bertflow.spark --help`` is the
command-line job.
"""

import os

from .. import _bertflow
from ._worker import SPARKFILES

__all__ = ["encode", "moment_stats", "fit", "transform", "ship_model", "local_session",
           "DEFAULT_SAMPLE_SIZE"]

#: Rows of the seeded sample a flow is fitted on (see :func:`fit`).
DEFAULT_SAMPLE_SIZE = 100_000

#: Environment variable naming a marker file for fault-injection tests: the
#: first task attempt that finds the file removes it and fails.
FAIL_ONCE_ENV = "BERTFLOW_SPARK_FAIL_ONCE"

#: Set (on the driver) to 1 to make every encode task print its worker's
#: pid, model loads, threads, load and encode seconds and peak RSS on the
#: executor's stderr, or to a file path (readable by the executors) to append
#: those lines there (``_worker.log_task``).
STATS_ENV = "BERTFLOW_SPARK_STATS"

_SIMPLE_TB = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def _types():
    from pyspark.sql import types as T

    return T


def _vector_type():
    T = _types()
    return T.ArrayType(T.FloatType(), containsNull=True)


def _with_field(schema, name, dtype):
    """``schema`` with column ``name`` replaced (kept in place) or appended."""
    T = _types()
    fields = list(schema.fields)
    new = T.StructField(name, dtype, nullable=True)
    for i, f in enumerate(fields):
        if f.name == name:
            fields[i] = new
            return T.StructType(fields)
    return T.StructType(fields + [new])


def _check_column(df, col, types, what):
    names = df.columns
    if col not in names:
        raise ValueError(f"bertflow.spark: no column {col!r} in the DataFrame (columns: {names})")
    dtype = df.schema[col].dataType
    if not isinstance(dtype, types):
        raise TypeError(f"bertflow.spark: column {col!r} is {dtype.simpleString()}, not {what}")
    return dtype


def _task_cpus(spark):
    """``spark.task.cpus`` of a SparkSession or a SparkContext (at least 1)."""
    conf = spark.getConf() if hasattr(spark, "getConf") else spark.conf
    try:
        n = int(conf.get("spark.task.cpus", "1"))
    except Exception:  # pragma: no cover - a session without the setting
        n = 1
    return max(n, 1)


def _resolve_model(model):
    """``model`` as the executors should see it: an existing local directory
    made absolute; a missing absolute or explicitly relative path fails here,
    on the driver. Anything else (a relative path the driver cannot see, a hub
    id, a :func:`ship_model` name) is left to the executors."""
    if model.startswith(SPARKFILES):
        return model
    path = os.path.expanduser(model)
    if os.path.exists(path):
        return os.path.abspath(path)
    if os.path.isabs(path) or model.startswith(("./", "../", "~")):
        raise FileNotFoundError(
            f"bertflow.spark: model directory {model!r} does not exist (on the driver). Every "
            "executor must read it at the same path (a shared file system or the cluster "
            "image) or get it with bertflow.spark.ship_model; pass check_model=False when "
            "only the executors can see it")
    return model


def ship_model(spark, path):
    """Ships a local model directory to every executor with
    ``SparkContext.addFile(path, recursive=True)`` and returns the name to pass
    as ``model`` (``"sparkfiles:<folder name>"``, resolved on each executor
    with ``SparkFiles.get``). Needs a classic session (not Spark Connect, where
    the model must be on a shared path or in the cluster image)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"bertflow.spark: {path} is not a model directory")
    spark.sparkContext.addFile(path, recursive=True)
    return SPARKFILES + os.path.basename(path.rstrip(os.sep))


def encode(df, text_col="text", *, model, pooling=None, output_col="embedding",
           batch_size=None, max_len=None, empty="error", threads=None, check_model=True,
           calibrator=None, allow_mismatch=False):
    """Adds an embedding column (``array<float>``) computed on the executors.

    Each Python worker loads the model once (cached per process, the embedding
    cache off) and encodes its partition batch by batch (Arrow batches of
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows); inside a batch the
    sentences are encoded in length-sorted mini-batches and the rows keep
    their order, so every vector equals ``bertflow encode``'s for the same
    sentence. Rows and every other column pass through unchanged.

    Args:
        df: The DataFrame.
        text_col: The string column to encode.
        model: A model directory readable at this path on every executor (a
            shared file system, the cluster image), a hub id in each executor's
            local Hugging Face cache, or the name returned by
            :func:`ship_model`.
        pooling: As for :class:`bertflow.Encoder` (default: the calibrator's,
            else core's default; ``bertflow.defaults()``).
        output_col: The new column (it must not exist yet).
        batch_size: Sentences per forward pass (default: core's).
        calibrator: A calibrator file or a fitted :class:`bertflow.Calibrator`
            applied on the executors through the same pipeline as the CLI's
            ``encode --calibrator``: it is checked against the model, pooling
            and weighting there (a calibrator fitted on another pooling, another
            model of the same width or with token weights is refused unless
            ``allow_mismatch``).
        allow_mismatch: As for :class:`bertflow.Encoder`.
        max_len: Token limit (default: the model's).
        empty: Empty or whitespace-only texts, as the CLI's ``--empty``:
            ``"error"`` (the job fails naming the row), ``"skip"`` (the row is
            dropped), ``"keep"`` (embedded as ``[CLS] [SEP]``). A null text
            always gives a null embedding.
        threads: Encoder threads per task; default ``spark.task.cpus``.
        check_model: Check on the driver that a model path exists (and pass
            an existing one on as an absolute path).

    Returns:
        A DataFrame with ``output_col`` appended (lazy, like every transformation).
    """
    cfg, schema = _encode_plan(df, text_col, model=model, pooling=pooling,
                               output_col=output_col, batch_size=batch_size, max_len=max_len,
                               empty=empty, threads=threads, check_model=check_model,
                               calibrator=calibrator, allow_mismatch=allow_mismatch)
    return df.mapInArrow(_in_worker("encode_batches", cfg), schema)


def _encode_plan(df, text_col, *, model, pooling, output_col, batch_size, max_len, empty,
                 threads, check_model, calibrator, allow_mismatch):
    """:func:`encode`'s checks; returns the worker's configuration and the
    output schema."""
    T = _types()
    _check_column(df, text_col, (T.StringType,), "a string column")
    if output_col in df.columns:
        raise ValueError(f"bertflow.spark: column {output_col!r} exists already")
    _bertflow.keep_rows([], empty, str)  # core's check of the rule's name
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)):
        raise TypeError(f"bertflow.spark: batch_size must be an int, got {batch_size!r}")
    cal_bytes = None
    if calibrator is not None:
        import bertflow

        if not hasattr(calibrator, "to_bytes"):
            calibrator = bertflow.load(calibrator)
        cal_bytes = calibrator.to_bytes()
    model = os.fspath(model)
    if check_model:
        model = _resolve_model(model)
    cfg = {
        "text_col": text_col,
        "output_col": output_col,
        "model": model,
        "pooling": pooling,
        "max_len": max_len,
        "batch_size": batch_size,
        "empty": empty,
        "threads": threads or _task_cpus(df.sparkSession),
        "calibrator": cal_bytes,
        "allow_mismatch": bool(allow_mismatch),
        "fail_once": os.environ.get(FAIL_ONCE_ENV),
        "log_stats": os.environ.get(STATS_ENV) or None,
    }
    return cfg, _with_field(df.schema, output_col, _vector_type())


def _in_worker(name, *args, module="_worker"):
    """The ``mapInArrow`` function that runs ``bertflow.spark.<module>.NAME(batches,
    *args)`` in a Python worker. A closure, so that it travels by value and
    imports bertflow only when the worker calls it, after setting
    ``BERTFLOW_SKLEARN=0``: scikit-learn, which ``import bertflow`` otherwise
    loads for the calibrators' estimator API, takes seconds to import in every
    worker process and no worker uses it."""

    def run(batches):
        import importlib
        import os

        os.environ.setdefault("BERTFLOW_SKLEARN", "0")
        mod = importlib.import_module("bertflow.spark." + module)
        return getattr(mod, name)(batches, *args)

    return run


def _stats_schema():
    T = _types()  # a StructType, not DDL: parsing DDL is a JVM call
    return T.StructType([T.StructField("count", T.LongType()),
                         T.StructField("dim", T.IntegerType()),
                         T.StructField("stats", T.BinaryType())])


def warm_worker(sc, model, *, pooling=None, max_len=None, threads=1, calibrator=None,
                allow_mismatch=False):
    """Starts a one-task job, in a thread, whose Python worker loads the
    encoder that :func:`encode` with these arguments would load (``model`` as
    the tasks see it, ``threads`` per task, ``calibrator`` a file's bytes),
    then goes back to the pool. Returns the thread: join it before the job
    whose first task should find that worker, and the model in it, ready.

    For a local session started with :func:`local_session`'s ``on_context``:
    the executor is this machine, Spark SQL's start keeps one core busy, and
    the worker's start (the daemon, its imports) and the model load run on
    another meanwhile. A failure to load is left to the job, which reports
    it; other arguments only cost a second load there."""
    import threading

    key = (model, pooling, max_len, threads, calibrator, bool(allow_mismatch))
    job = sc.parallelize([0], 1).mapPartitions(_in_worker("warm", key))
    thread = threading.Thread(target=job.collect, name="bertflow-warm-worker", daemon=True)
    thread.start()
    return thread


def moment_stats(df, col="embedding", *, merge_partitions=None):
    """The :class:`bertflow.MomentStats` (count, mean, co-moments in float64)
    of the vectors in ``col``, without collecting them.

    A tree aggregation of depth 2: each partition's statistics are computed
    where it lives (one row of ``8 * dim^2`` bytes per non-empty partition),
    shuffled into a few merge tasks (``merge_partitions``, default: as many as
    adaptive query execution sizes for that data, one for a small job), and
    the merged rows are combined on the driver. Null vectors are left out;
    vectors of different lengths are an error.

    Raises:
        ValueError: the column holds no vector.
    """
    from pyspark.sql import functions as F

    from ._worker import merge_stats

    T = _types()
    _check_column(df, col, (T.ArrayType,), "an array column of vectors")
    partials = df.select(col).mapInArrow(_in_worker("stats_batches", col), _stats_schema())
    key = F.xxhash64("stats")
    if merge_partitions is None:
        spread = partials.repartition(key)
    else:
        spread = partials.repartition(int(merge_partitions), key)
    merged = spread.mapInArrow(_in_worker("merge_batches"), _stats_schema())
    total = merge_stats(merged.toArrow().column("stats").to_pylist())
    if total is None:
        raise ValueError(f"bertflow.spark: column {col!r} holds no vector to fit on")
    return total


def _flow_sample(df, col, n, seed):
    """Up to ``n`` non-null vectors chosen by a seeded hash of their values
    (the same rows whatever the partitioning), in hash order, and the number
    of non-null vectors."""
    import numpy as np
    from pyspark.sql import functions as F

    from ._worker import matrix

    rows = df.select(col).where(F.col(col).isNotNull())
    total = rows.count()
    keyed = rows.select(F.xxhash64(F.col(col), F.lit(seed)).alias("_k"), F.col(col))
    table = keyed.orderBy("_k").limit(n).toArrow()
    X, _ = matrix(table.column(col), col)
    return np.ascontiguousarray(X, dtype=np.float32), total


def _from_moments(kind):
    """Whether the registry fits `kind` from moment statistics alone."""
    import bertflow

    return next(k["moments"] for k in bertflow.kinds() if k["name"] == kind)


def calibrate_help():
    """The kinds `--calibrate` takes and how each is fitted, from the registry."""
    import bertflow

    kinds = bertflow.kinds()
    exact = ", ".join(k["synopsis"] for k in kinds if k["moments"])
    sampled = ", ".join(k["synopsis"] for k in kinds if not k["moments"])
    return (f"fit this calibrator on the whole input and apply it: {exact} (exact, from "
            f"merged statistics) or {sampled} (on a seeded sample, see --sample-size); "
            "default none")


def fit(df, col="embedding", spec="whiten", *, sample_size=DEFAULT_SAMPLE_SIZE, source=None):
    """Fits a calibrator on the vectors of ``col``; returns it, fitted.

    The kinds whose registry entry says ``moments`` (``bertflow.kinds()``:
    none, sn, whiten, natsv, sn+natsv, softwhiten) are fitted from
    :func:`moment_stats`: exact (equal to fitting on every row at once) for
    any number of rows, with O(dim^2) memory on the driver.

    The others (``flow``, ``auto``) need their sample in the driver's memory:
    fitted on ``min(sample_size, rows)`` vectors chosen by a hash of their
    values seeded with the calibrator's ``seed`` (a flow's; for kinds
    without one, core's sample seed, ``bertflow.defaults()["sample_seed"]``,
    as the CLI's ``--sample``), so the sample does not depend on the partitioning, in hash
    order. The file records the sample size
    (``fit_corpus_size``) and, when it is a sample, the number of rows it was
    drawn from (``sampled_from``). Memory: ``sample_size * dim * 4`` bytes.

    Args:
        spec: A spec string (``"whiten:k=256"``) or an unfitted calibrator.
        sample_size: Rows of the sample of a kind fitted on one (flow, auto).
        source: Recorded in the file, as in :meth:`bertflow.Calibrator.fit`: a
            :class:`bertflow.Encoder` (so that ``bertflow encode
            --calibrator`` accepts the file for that model and pooling), a
            label, or None.

    Tip: ``df.persist()`` first when ``df`` is expensive to compute (a flow
    reads it twice, and a later :func:`transform` once more).
    """
    import bertflow

    c = bertflow.calibrator(spec)
    if _from_moments(c._kind):
        return moment_stats(df, col).fit(c, source=source)
    if isinstance(sample_size, bool) or not isinstance(sample_size, int):
        raise TypeError(f"bertflow.spark: sample_size must be an int, got {sample_size!r}")
    try:
        _bertflow.check_sample(max(sample_size, 0))  # core's range
    except ValueError as e:
        raise ValueError(f"bertflow.spark: sample_size {sample_size}: {e}") from None
    T = _types()
    _check_column(df, col, (T.ArrayType,), "an array column of vectors")
    import bertflow

    seed = getattr(c, "seed", None)
    if seed is None:
        seed = bertflow.defaults()["sample_seed"]
    X, total = _flow_sample(df, col, sample_size, int(seed))
    if X.shape[0] < 2:
        raise ValueError(f"bertflow.spark: column {col!r} holds {X.shape[0]} vector(s); "
                         f"{c._kind} needs at least 2")
    c.fit(X, source=source)
    if X.shape[0] < total:
        c._set_fitted(c.calibrator_.with_sampled_from(total))
    return c


def transform(df, col="embedding", calibrator=None, output_col=None):
    """Applies a fitted calibrator to the vectors of ``col`` on the executors.

    Args:
        calibrator: A fitted bertflow calibrator, a calibrator file's path, or
            its bytes; the file's bytes travel to the executors inside the
            mapped function (no broadcast) and each worker parses them once.
        output_col: The output column; default ``col`` (replaced in place).

    Null vectors stay null; a vector of the wrong length fails the job. A
    calibrator that ends in a quantizer stage (``bertflow fit --quantize``)
    writes its codes: a ``binary`` column of each row's code bytes (int8
    codes as their two's-complement bytes; ``numpy.frombuffer`` reads them).
    """
    cfg, schema = _transform_plan(df, col, calibrator, output_col)
    return df.mapInArrow(_in_worker("transform_batches", cfg), schema)


def _transform_plan(df, col, calibrator, output_col):
    """:func:`transform`'s checks; returns the worker's configuration and the
    output schema."""
    import bertflow

    T = _types()
    _check_column(df, col, (T.ArrayType,), "an array column of vectors")
    if calibrator is None:
        raise TypeError("bertflow.spark.transform needs a calibrator")
    if isinstance(calibrator, (bytes, bytearray, memoryview)):
        data = bytes(calibrator)
        bertflow.Calibrator.from_bytes(data)  # fail on the driver for damaged bytes
    elif isinstance(calibrator, bertflow.Calibrator):
        data = calibrator.to_bytes()
    else:
        data = bertflow.load(calibrator).to_bytes()
    codes = bertflow.Calibrator.from_bytes(data).quantizer_ is not None
    cfg = {
        "col": col,
        "output_col": output_col or col,
        "calibrator": data,
        "codes": codes,
        "fail_once": os.environ.get(FAIL_ONCE_ENV),
    }
    dtype = _types().BinaryType() if codes else _vector_type()
    return cfg, _with_field(df.schema, cfg["output_col"], dtype)


def _import_aside(module):
    """Imports ``module`` in a thread. For ``pyspark.testing.utils``: PySpark's
    first py4j call with arguments imports it (``pyspark.sql.types``' numpy
    converter asks it ``have_numpy``), and it imports pandas, 0.3 s of a
    local session's start; the JVM's start leaves the driver idle meanwhile.
    (A second importer waits for the first: Python's import lock.)"""
    import importlib
    import sys
    import threading

    if module not in sys.modules:
        threading.Thread(target=importlib.import_module, args=(module,), daemon=True,
                         name=f"bertflow-import-{module}").start()


def local_session(master="local[2]", app_name="bertflow", conf=None, connect=False,
                  on_context=None):
    """A local SparkSession set up for bertflow: workers run this interpreter
    (``PYSPARK_PYTHON``), Spark binds to 127.0.0.1 (``SPARK_LOCAL_IP``), the
    UI is off, shuffles use few partitions and, when stderr is not a
    terminal, Spark draws no progress bar. Environment variables already
    set are kept; they take effect only when no session is running yet.

    With ``connect=True`` the session is a Spark Connect client of a local
    Connect server that PySpark starts for it (``builder.remote(master)``; needs
    the ``connect`` packages of requirements-spark.txt). bertflow.spark runs
    unchanged over it, as it would against ``sc://host:port`` on a cluster. A
    process holds classic or Connect sessions, not both.

    A classic local session's JVM starts with a class-data-sharing archive
    written by the first one, the client compiler and the serial collector
    (``bertflow.spark._jvm``; several times faster to start and to run its
    first job on 2 cores), unless ``conf`` sets
    ``spark.driver.extraJavaOptions`` or ``BERTFLOW_SPARK_JVM_CACHE=0``; it
    logs warnings and errors without Spark's start-up notes
    (``bertflow/spark/log4j2.properties``), unless that option is set or a
    log4j2 configuration of your own is in ``$SPARK_CONF_DIR``.

    ``on_context``, for a classic session that starts here, is called with
    the SparkContext as soon as it runs, before Spark SQL starts (most of a
    second on a small machine): time to start a job in a thread, such as
    :func:`warm_worker`. RDD and SQL jobs share Python workers in such a
    session (``SPARK_SIMPLIFIED_TRACEBACK`` is in every worker's environment,
    as SQL's runners set it, unless ``conf`` turns simplified tracebacks
    off)."""
    import sys

    from ._jvm import spark_home

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # spark-submit finds it without starting Python (find-spark-home).
    os.environ.setdefault("SPARK_HOME", spark_home())
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    b = b.remote(master) if connect else b.master(master)
    # The UI setting is static: a Connect client cannot set it (PySpark warns).
    settings = {"spark.sql.shuffle.partitions": "8"}
    if not connect:
        settings["spark.ui.enabled"] = "false"
        if not getattr(sys.stderr, "isatty", lambda: False)():
            # Spark's progress bar ("[Stage 0:>  (0 + 1) / 1]", redrawn with
            # carriage returns) is for a terminal; in a log it is noise.
            settings["spark.ui.showConsoleProgress"] = "false"
    settings.update(conf or {})
    fresh = SparkSession.getActiveSession() is None
    if (not connect and master.startswith("local") and "spark.driver.extraJavaOptions" not in
            settings and fresh):
        from ._jvm import driver_options, log_options

        # The driver JVM is the only executor: start it fast, and without
        # Spark's start-up notes (see _jvm).
        settings["spark.driver.extraJavaOptions"] = driver_options() + log_options()
    if not connect and str(settings.get(_SIMPLE_TB, "true")).lower() == "true":
        # SQL's Python runners add it to the worker's environment, RDD's do not;
        # a different environment is a different daemon and pool of workers.
        settings.setdefault("spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK", "1")
    if not connect and fresh:
        _import_aside("pyspark.testing.utils")
    if on_context is not None and not connect and fresh:
        from pyspark import SparkConf, SparkContext

        sc_conf = SparkConf().setMaster(master).setAppName(app_name)
        on_context(SparkContext.getOrCreate(sc_conf.setAll(list(settings.items()))))
    for k, v in settings.items():
        b = b.config(k, v)
    return b.getOrCreate()
