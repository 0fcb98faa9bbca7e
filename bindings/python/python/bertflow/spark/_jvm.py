"""JVM options for a local Spark session: a short-lived driver JVM that is
also the only executor, started once per command.

Measured on a 2-core machine (docs/spark.md): most of a local session's
start and of its first job is class loading and JIT compilation, not Spark's
work. Standard HotSpot options remove most of it:

- an application class-data-sharing archive (AppCDS, JDK 13+): the classes
  the JVM loaded in an earlier run are mapped from one file instead of being
  read from Spark's jars, parsed and verified again. The first session
  writes it at exit (``-XX:ArchiveClassesAtExit``, to a private temporary
  name); the next session adopts it (renamed into place once its header is
  complete) and maps it (``-XX:SharedArchiveFile``). A stale archive (another
  Java or PySpark) is ignored by the JVM, and the key below changes with
  them anyway;
- ``-XX:TieredStopAtLevel=1``: the client compiler only, whose code is ready
  sooner (the heavy work of a bertflow job runs in the Python workers);
- ``-XX:+UseSerialGC``: no parallel collector threads competing with the
  encoder for the cores;
- ``-Xlog:cds*=off``: the JVM's notes on the archive (hundreds of lines on
  stdout when it writes one: classes of signed jars and old class files are
  left out of it) are not printed. An archive the JVM cannot use is ignored
  silently, as none.

No archive is written or used when a directory on Spark's class path holds
files (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``; ``$HADOOP_CONF_DIR``,
``$YARN_CONF_DIR``, ``$SPARK_DIST_CLASSPATH``): the JVM refuses to archive
with one ("Cannot have non-empty directory in paths"), so such a session
starts with the other options only.

The session logs through ``log4j2.properties`` beside this module (see
:func:`log_options`) unless the user's class path has a log4j2 configuration.

None of this applies when ``spark.driver.extraJavaOptions`` is given (in
``conf`` or by spark-submit) or on a cluster; ``BERTFLOW_SPARK_JVM_CACHE=0``
leaves out the archive only. The archives live in
``$BERTFLOW_SPARK_JVM_CACHE`` (a folder), else
``$XDG_CACHE_HOME/bertflow/spark-jvm``, else ``~/.cache/bertflow/spark-jvm``;
about 150-180 MB each.
"""

import hashlib
import os
import shutil
import struct
import time

#: Options of every local session (besides the archive).
FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:cds*=off"

#: First bytes of a complete dynamic CDS archive (HotSpot's
#: CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian): written last, with the header.
_DYNAMIC_MAGIC = 0xF00BABA8

ENV = "BERTFLOW_SPARK_JVM_CACHE"

#: (folder, archive name) that this process's JVM writes at exit, if any.
_PENDING = []


def cache_dir():
    """The archives' folder, or None when switched off."""
    env = os.environ.get(ENV)
    if env == "0":
        return None
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bertflow", "spark-jvm")


def _java():
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return os.path.realpath(os.path.join(home, "bin", "java"))
    found = shutil.which("java")
    return os.path.realpath(found) if found else None


def spark_home():
    """The Spark installation ``spark-submit`` runs from (``$SPARK_HOME``,
    else PySpark's own folder, as PySpark finds it)."""
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


def class_path_dirs(home=None):
    """The folders the Spark launcher puts on the driver's class path besides
    the jars (the configuration folders and ``$SPARK_DIST_CLASSPATH``)."""
    home = home or spark_home()
    dirs = [os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")]
    dirs += [os.environ[v] for v in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if os.environ.get(v)]
    dirs += [p for p in os.environ.get("SPARK_DIST_CLASSPATH", "").split(os.pathsep) if p]
    return dirs


def _archivable(dirs):
    """False when one of ``dirs`` is a folder that holds anything (the JVM
    cannot archive or map classes with such a class path)."""
    for d in dirs:
        try:
            if os.path.isdir(d) and os.listdir(d):
                return False
        except OSError:
            return False
    return True


#: bertflow's logging configuration for a local session (next to this file).
LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def log_options(home=None):
    """`` -Dlog4j2.configurationFile=...`` naming :data:`LOG_CONFIG`
    (warnings and errors, without Spark's three start-up notes and Hadoop's
    native-library warning), or ``""`` where a folder on Spark's class path
    holds a log4j2 configuration (the user's applies) or the path has a space
    (the launcher splits the options at spaces)."""
    for d in class_path_dirs(home):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        if any(n.startswith("log4j2") and not n.endswith(".template") for n in names):
            return ""
    if " " in LOG_CONFIG or not os.path.isfile(LOG_CONFIG):
        return ""
    return f" -Dlog4j2.configurationFile={LOG_CONFIG}"


def _key(home, dirs):
    """Changes with the JVM, Spark's jars, the class path and the options."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = os.path.join(home, "jars")
    parts = [java, str(os.stat(java).st_mtime_ns), pyspark.__version__, jars, FAST_START, *dirs]
    try:
        parts.append(str(os.stat(jars).st_mtime_ns))
    except OSError:
        pass
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _complete(path):
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<I", head)[0] == _DYNAMIC_MAGIC


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _adopt(folder, name, finished=None):
    """Renames a finished temporary archive into place (one whose writer,
    named by the Python pid in its name, is gone, or is ``finished``);
    removes duplicates and old half-written ones."""
    final = os.path.join(folder, name)
    for f in sorted(os.listdir(folder)):
        if not (f.startswith(name + ".") and f.endswith(".tmp")):
            continue
        path = os.path.join(folder, f)
        try:
            pid = int(f[len(name) + 1:-len(".tmp")])
        except ValueError:
            continue
        if pid != finished and _alive(pid):
            continue  # its JVM writes it at exit
        if not os.path.exists(final) and _complete(path):
            os.replace(path, final)
        elif os.path.exists(final) or time.time() - os.path.getmtime(path) > 600:
            try:  # a duplicate, or left half-written by a killed JVM
                os.remove(path)
            except OSError:
                pass
    return final if _complete(final) else None


def driver_options():
    """``spark.driver.extraJavaOptions`` for a local session."""
    folder = cache_dir()
    if folder is None:
        return FAST_START
    home = spark_home()
    dirs = class_path_dirs(home)
    key = _key(home, dirs) if _archivable(dirs) else None
    if key is None:
        return FAST_START
    try:
        os.makedirs(folder, exist_ok=True)
        name = f"spark-{key}.jsa"
        archive = _adopt(folder, name)
    except OSError:
        return FAST_START
    if archive:
        return f"{FAST_START} -XX:SharedArchiveFile={archive}"
    tmp = os.path.join(folder, f"{name}.{os.getpid()}.tmp")
    _PENDING[:] = [(folder, name)]
    return f"{FAST_START} -XX:ArchiveClassesAtExit={tmp}"


def finish(spark):
    """Ends a local session for good (the command's last step). When this
    process's JVM writes a class archive at exit, lets it exit now and adopts
    the archive, so that the next session starts from it."""
    if not _PENDING:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    spark.stop()
    if proc is None or proc.stdin is None:
        return
    import sys

    folder, name = _PENDING[0]
    print(f"bertflow.spark: saving the JVM's class archive for faster starts (once, 15-30 s; "
          f"{os.path.join(folder, name)}; {ENV}=0 skips it)", file=sys.stderr, flush=True)
    try:
        proc.stdin.close()  # the gateway JVM exits at the end of its stdin
        proc.wait(timeout=180)
    except Exception:  # noqa: BLE001 - best effort: the next session adopts it
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    _PENDING.clear()
    try:
        _adopt(folder, name, finished=os.getpid())
    except OSError:
        pass
