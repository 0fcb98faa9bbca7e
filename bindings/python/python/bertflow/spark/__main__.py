"""``python -m bertflow.spark``: sentences in, (calibrated) embeddings out, on Spark.

Reads Parquet, JSONL or a text file (one sentence per line), encodes the text
column on the executors, optionally fits a calibrator on the whole corpus and
applies it, and writes Parquet: every input column (an id column kept, or
added from the input order) plus ``embedding`` (``array<float>``). With
``--index FILE`` the driver then builds a search index from that output with
core's ``index build --vectors`` (the model, pooling and calibrator recorded;
no second encoding). The same command runs unchanged under ``spark-submit``
(the cluster's master then applies; ``--master`` is for local runs).
"""

import argparse
import os
import sys
import time

from bertflow import _bertflow
from bertflow.spark import DEFAULT_SAMPLE_SIZE, _direct, _worker, calibrate_help


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m bertflow.spark",
        description="Encode (and calibrate) sentences with bertflow on Apache Spark; "
        "writes Parquet.")
    p.add_argument("--input", required=True,
                   help="Parquet file or folder, JSONL (.jsonl/.json/.ndjson) or text file "
                   "(one sentence per line)")
    p.add_argument("--format", choices=("auto", "parquet", "jsonl", "text"), default="auto",
                   help="input format (default: by extension; a folder is Parquet)")
    p.add_argument("--text-col", default="text", help="the column to encode (default: text)")
    p.add_argument("--id-col", default="id",
                   help="kept when the input has it, else added as the 0-based input order "
                   "(default: id)")
    p.add_argument("--output", required=True, help="the Parquet folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--writer", choices=_direct.WRITERS, default="auto",
                   help="who writes the Parquet: spark (Spark's writer: the vectors go back "
                   "through the JVM), direct (each task writes its part file with pyarrow; the "
                   "executors must write where the driver commits) or auto (default: direct "
                   "for a local master and a local output path, else spark); same folder "
                   "layout, columns and types either way")
    p.add_argument("--model", default=None,
                   help="model directory readable on every executor, or a hub id in their "
                   "local Hugging Face cache (default: bertflow's, see bertflow.defaults(): "
                   "$BERTFLOW_MODEL, else models/all-MiniLM-L6-v2)")
    p.add_argument("--ship-model", action="store_true",
                   help="send the model directory to the executors with SparkContext.addFile "
                   "instead of reading it from a shared path")
    p.add_argument("--pooling", default=None,
                   help="pooling (default: the calibrator's, else bertflow's default)")
    p.add_argument("--max-len", type=int, default=None, help="token limit per sentence")
    p.add_argument("--batch-size", type=int, default=None,
                   help="sentences per forward pass (default: bertflow's)")
    p.add_argument("--empty", choices=_worker.EMPTY_RULES, default="error",
                   help="empty texts: error (default), skip (drop the row) or keep; a null "
                   "text gives a null embedding")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--calibrate", default="none", metavar="SPEC", help=calibrate_help())
    g.add_argument("--calibrator", metavar="FILE",
                   help="apply this calibrator file instead of fitting one (checked against "
                   "the model, pooling and weighting, as by the CLI)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="use a --calibrator fitted on another model or pooling (never another "
                   "dimension)")
    p.add_argument("--sample-size", type=int, default=DEFAULT_SAMPLE_SIZE,
                   help=f"rows a flow or auto is fitted on, collected to the driver (default: "
                   f"{DEFAULT_SAMPLE_SIZE})")
    p.add_argument("--save-calibrator", metavar="FILE",
                   help="write the fitted calibrator (the CLI's .safetensors format)")
    p.add_argument("--master", default=None,
                   help="Spark master of a run without spark-submit, e.g. local[2] (default: "
                   "local[*]); under spark-submit its --master applies")
    p.add_argument("--partitions", type=int, default=None,
                   help="repartition the input into N partitions before encoding (default: "
                   "in local mode a one-partition input is one task with an encoder thread "
                   "per core, an input with fewer partitions than cores is split into one per "
                   "core; else the input's partitions)")
    p.add_argument("--index", metavar="FILE",
                   help="then build a search index (bertflow index build --vectors) from the "
                   "output, on the driver: --output must be a path the driver reads, and the "
                   "driver must load the model (the index records model, pooling and "
                   "calibrator); a null or empty text's row fails it (use --empty skip)")
    p.add_argument("--quantize", metavar="SPEC",
                   help="with --index: store codes too, as `bertflow index build --quantize` "
                   "(int8, binary:itq=true, pq:m=M, ...)")
    a = p.parse_args(argv)
    if a.quantize and not a.index:
        p.error("--quantize needs --index")
    return a


def session(master, on_context=None):
    """The running session, the one spark-submit (or SPARK_REMOTE, for Spark
    Connect) configures, or else a local one (``master``, default local[*];
    ``on_context`` as for :func:`bertflow.spark.local_session`)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_REMOTE" in os.environ:
        if master:
            print("bertflow.spark: --master is ignored under spark-submit / Spark Connect",
                  file=sys.stderr)
        return SparkSession.builder.appName("bertflow").getOrCreate()
    from bertflow.spark import local_session

    return local_session(master or "local[*]", on_context=on_context)


def read_input(spark, path, fmt, text_col):
    if fmt == "auto":
        ext = os.path.splitext(path.rstrip("/"))[1].lower()
        if os.path.isdir(path) or ext == ".parquet":
            fmt = "parquet"
        elif _bertflow.is_jsonl_path(path.rstrip("/")):  # core's rule, as bertflow encode
            fmt = "jsonl"
        else:
            fmt = "text"
    if fmt == "parquet":
        schema = local_parquet_schema(path)
        if schema is not None:
            return spark.read.schema(schema).parquet(path)
        return spark.read.parquet(path)
    if fmt == "jsonl":
        return spark.read.json(path)
    return spark.read.text(path).withColumnRenamed("value", text_col)


def local_parquet_schema(path):
    """The Spark schema of a local Parquet file or folder, from one file's
    footer read here (pyarrow), or None (another file system, no part file,
    a type Spark's Arrow conversion does not take): Spark's own discovery runs
    a job to read footers, which in a fresh JVM costs a second or more."""
    local = _direct.local_path(path)
    if local is None:
        return None
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        if os.path.isdir(local):
            parts = _direct.data_files(local)
            if not parts or not all(f.endswith(".parquet") for f in parts):
                return None  # partition folders (key=value) or other files: Spark decides
            local = os.path.join(local, parts[0])
        return _nullable(from_arrow_schema(pq.read_schema(local)))
    except Exception:  # noqa: BLE001 - Spark's discovery gives the error, if any
        return None


def _nullable(dtype):
    """``dtype`` with every field, array element and map value nullable, as
    Spark's Parquet discovery reads them (required columns included)."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True, f.metadata)
                             for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_nullable(dtype.elementType), True)
    if isinstance(dtype, T.MapType):
        return T.MapType(dtype.keyType, _nullable(dtype.valueType), True)
    return dtype


def add_ids(df, id_col, partitions=None):
    """``df`` with ``id_col`` = the 0-based row number in input order
    (partition by partition, row by row), from the DataFrame API alone: one
    small job counts the rows of each partition, unless ``partitions`` (the
    input's, see :func:`input_partitions`) is 1, where the row number within
    the partition is the id."""
    from pyspark.sql import functions as F

    if partitions == 1:
        # Partition 0's monotonically increasing ids are 0, 1, 2, ...
        return df.withColumn(id_col, F.monotonically_increasing_id())
    pid = F.spark_partition_id()
    counts = dict(df.select(pid.alias("p")).groupBy("p").count().collect())
    offsets, acc = [], 0
    for p in range(max(counts, default=-1) + 1):
        offsets.append(acc)
        acc += counts.get(p, 0)
    if not offsets:
        return df.withColumn(id_col, F.lit(0).cast("long"))
    within = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << 33) - 1))
    start = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets]), pid + 1)
    return df.withColumn(id_col, start + within)


def input_partitions(df):
    """The partitions of ``df`` as Spark plans them (no job runs), or None
    where it cannot tell (Spark Connect)."""
    try:
        return int(df._jdf.rdd().getNumPartitions())
    except Exception:  # noqa: BLE001 - a Connect DataFrame has no JVM handle
        return None


def plan_partitions(requested, cores, have):
    """How to spread the input over the cores: ``(partitions, threads)``, the
    partitions to repartition into before encoding (None: keep the input's, no
    shuffle) and the encoder threads per task (None: ``spark.task.cpus``).
    ``--partitions`` wins; in local mode, a one-partition input (one file) is
    one task whose encoder runs a thread per core, as ``bertflow encode
    --threads N`` does (no shuffle, one worker, one model load); an input with
    fewer partitions than cores is split into one per core; an input with at
    least that many is kept (each task runs in a Python worker that keeps its
    model, so more tasks than cores only add scheduling); elsewhere the
    input's."""
    if requested:
        return requested, None
    if not cores or (have is not None and have >= cores):
        return None, None
    if have == 1:
        return None, cores
    return cores, None


def local_cores(master):
    """Task slots of a local master (local[N], local[N,F], local[*]), else None."""
    if not master.startswith("local"):
        return None
    inner = master[len("local"):].strip("[]").split(",")[0]
    if inner in ("", "*"):
        return os.cpu_count() or 1
    return int(inner) if inner.isdigit() else None


def one_small_file(path):
    """True when ``path`` is one local file, or a folder of one data file,
    small enough to be one partition whatever Spark's split settings
    (Spark's default ``openCostInBytes``, 4 MiB, or less)."""
    local = _direct.local_path(path)
    if local is None:
        return False
    try:
        if os.path.isdir(local):
            data = _direct.data_files(local)
            if len(data) != 1:
                return False
            local = os.path.join(local, data[0])
        return os.path.isfile(local) and os.path.getsize(local) <= 4 << 20
    except OSError:
        return False


def warm_up(a, calibrator, started):
    """``on_context`` for the command's own local session: starts
    :func:`bertflow.spark.warm_worker` with the encoder the encode job will
    ask for (its threads per task guessed from the input: see
    :func:`plan_partitions`) and appends the thread to ``started``."""
    if a.ship_model:
        return None  # the model reaches the executors only after the session starts
    from bertflow.spark import _resolve_model, _task_cpus, warm_worker

    def start(sc):
        cores = local_cores(sc.master)
        if cores is None:
            return  # a cluster's executors are elsewhere
        _, threads = plan_partitions(a.partitions, cores, 1 if one_small_file(a.input) else None)
        try:
            model = _resolve_model(os.fspath(a.model))
        except (FileNotFoundError, ValueError):
            return  # the job reports it
        started.append(warm_worker(
            sc, model, pooling=a.pooling, max_len=a.max_len,
            threads=threads or _task_cpus(sc),
            calibrator=calibrator.to_bytes() if a.calibrator else None,
            allow_mismatch=a.allow_mismatch))

    return start


def driver_source(model, pooling, max_len):
    """The Encoder whose identity the calibrator file records, when the driver
    can load the model; else None (the file then says external embeddings)."""
    import bertflow

    try:
        return bertflow.Encoder(model, pooling=pooling, max_len=max_len, threads=1, cache=False)
    except (FileNotFoundError, ValueError) as e:
        print(f"bertflow.spark: the driver cannot load {model!r} ({e}); the calibrator file "
              "will record external embeddings", file=sys.stderr)
        return None


def main(argv=None):
    t_start = _worker._process_age()  # Python's start and imports, when run as a command
    a = parse_args(argv)
    import bertflow

    if a.model is None:
        a.model = bertflow.defaults()["model"]
    from bertflow.spark import _encode_plan, _transform_plan, encode, fit, ship_model, transform

    # Bad arguments fail before the JVM starts.
    if a.calibrator:
        calibrator = bertflow.load(a.calibrator)
    else:
        calibrator = bertflow.calibrator(a.calibrate)
    if a.save_calibrator and not a.calibrator and calibrator._kind == "none":
        raise SystemExit("bertflow.spark: --save-calibrator needs --calibrate SPEC")
    for path in (a.output, a.index):
        if path and not a.overwrite and os.path.exists(path):
            raise SystemExit(f"bertflow.spark: {path} exists (pass --overwrite to replace it)")
    try:
        _direct.choose(a.writer, a.master or "local", a.output)  # a bad --writer fails here
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if a.index:
        _index_checks(a, calibrator)
    t0 = time.perf_counter()
    from pyspark.sql import SparkSession

    own_session = SparkSession.getActiveSession() is None and not (
        "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_REMOTE" in os.environ)
    warming = []
    spark = session(a.master, warm_up(a, calibrator, warming))
    t_session = time.perf_counter() - t0
    model = a.model
    if a.ship_model:
        model = ship_model(spark, model)

    df = read_input(spark, a.input, a.format, a.text_col)
    if a.text_col not in df.columns:
        raise SystemExit(f"bertflow.spark: {a.input} has no column {a.text_col!r} "
                         f"(columns: {df.columns}); pass --text-col")
    have = input_partitions(df)
    t = time.perf_counter()
    if a.id_col not in df.columns:
        df = add_ids(df, a.id_col, have)
    t_ids = time.perf_counter() - t
    master = spark.conf.get("spark.master", "")
    parts, threads = plan_partitions(a.partitions, local_cores(master), have)
    if parts:
        df = df.repartition(parts)
    direct = _direct.choose(a.writer, master, a.output)
    # A calibrator file runs inside the encoder's pipeline on the executors,
    # checked there against the model, pooling and weighting (core's rules).
    enc_args = dict(model=model, pooling=a.pooling, output_col="embedding",
                    max_len=a.max_len, batch_size=a.batch_size, empty=a.empty,
                    threads=threads, check_model=not a.ship_model,
                    calibrator=calibrator if a.calibrator else None,
                    allow_mismatch=a.allow_mismatch)
    kind = calibrator._kind
    fitted = None
    for thread in warming:
        thread.join()  # its worker, with the model loaded, takes the first task
    if a.calibrator or kind == "none":
        if direct:
            _direct.write(df, "encode_batches", *_encode_plan(df, a.text_col, **enc_args),
                          a.output, overwrite=a.overwrite)
        else:
            _spark_write(encode(df, a.text_col, **enc_args), a)
    else:
        from pyspark import StorageLevel

        emb = encode(df, a.text_col, **enc_args).persist(StorageLevel.MEMORY_AND_DISK)
        local_model = model if not a.ship_model else a.model
        fitted = fit(emb, "embedding", calibrator, sample_size=a.sample_size,
                     source=driver_source(local_model, a.pooling, a.max_len))
        print(f"bertflow.spark: fitted {fitted.describe()} on {fitted.meta_['fit_corpus_size']} "
              "rows" + (f" sampled from {fitted.meta_['sampled_from']}"
                        if fitted.meta_.get("sampled_from") else ""), file=sys.stderr)
        if a.save_calibrator:
            fitted.save(a.save_calibrator)
        if direct:
            _direct.write(emb, "transform_batches",
                          *_transform_plan(emb, "embedding", fitted, None),
                          a.output, overwrite=a.overwrite)
        else:
            _spark_write(transform(emb, "embedding", fitted), a)
        emb.unpersist()
    t_job = time.perf_counter() - t0 - t_session - t_ids
    import resource

    t = time.perf_counter()
    if a.index:
        used = calibrator if a.calibrator else fitted
        n = build_index(a, a.model if a.ship_model else model, used)
        what = f"; indexed into {a.index} in {time.perf_counter() - t:.1f} s"
    else:
        n, what = output_rows(spark, a.output), ""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"bertflow.spark: wrote {n} rows to {a.output} (start {t_start:.2f} s, session "
          f"{t_session:.2f} s, ids {t_ids:.2f} s, job {t_job:.2f} s, driver peak RSS {rss:.0f} "
          f"MB){what}", file=sys.stderr)
    if own_session:
        from bertflow.spark import _jvm

        _jvm.finish(spark)  # the first local run keeps its JVM's class archive
    return 0


def _spark_write(out, a):
    """Spark's own writer (``--writer spark``). Plain encoding: Parquet's
    dictionary encoding of the embeddings (every float distinct) is built and
    then dropped in every part file; without it the write takes a third less
    time."""
    (out.write.mode("overwrite" if a.overwrite else "error")
     .option("parquet.enable.dictionary", "false").parquet(a.output))


def output_rows(spark, path):
    """Rows written: from the part files' footers when the driver reads the
    output (no Spark job), else counted by Spark."""
    if os.path.isdir(path):
        import pyarrow.parquet as pq

        parts = [f for f in _direct.data_files(path) if f.endswith(".parquet")]
        return sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows for f in parts)
    return spark.read.parquet(path).count()


def _index_checks(a, calibrator):
    """--index's conditions, checked before the JVM starts."""
    if a.calibrator and calibrator.quantizer_ is not None:
        raise SystemExit("bertflow.spark: --index needs vectors; the calibrator ends in a "
                         "quantizer (codes): index with --quantize instead")
    if _direct.local_path(a.output) is None:
        raise SystemExit(f"bertflow.spark: --index reads the output on the driver; "
                         f"{a.output} is not a local path")
    if a.quantize:
        try:
            _bertflow.check_quantize(a.quantize)  # core's parser: a bad spec fails here
        except ValueError as e:
            raise SystemExit(f"bertflow.spark: --quantize: {e}") from None


def build_index(a, model, calibrator):
    """Core's ``index build --vectors OUTPUT`` with the job's model, pooling
    and calibrator (the pipeline that made the vectors; the calibrator file is
    copied beside the index, as ``index build --calibrator`` does); returns
    the rows."""
    import tempfile

    import bertflow

    path = _direct.local_path(a.output)
    with tempfile.TemporaryDirectory(prefix="bertflow-index-") as tmp:
        cal_file = a.calibrator or a.save_calibrator
        if calibrator is not None and cal_file is None:
            cal_file = os.path.join(tmp, "calibrator.safetensors")
            calibrator.save(cal_file)
        enc = bertflow.Encoder(model, pooling=a.pooling, max_len=a.max_len, threads=1,
                               cache=False, calibrator=cal_file if calibrator else None,
                               allow_mismatch=a.allow_mismatch)
        index = bertflow.Index.build(a.index, vectors=path, encoder=enc, quantize=a.quantize)
    return len(index)


if __name__ == "__main__":
    sys.exit(main())
