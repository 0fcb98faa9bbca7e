"""The local driver JVM's options (bertflow.spark._jvm): the class archive
is written by a first session and mapped by the next, its notes are not
printed, and a class path the JVM cannot archive gets no archive."""

import os
import struct
import subprocess
import sys

import pytest

from bertflow.spark import _jvm

pytest.importorskip("pyspark")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "jvm-cache"
    monkeypatch.setenv(_jvm.ENV, str(folder))
    for var in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(_jvm, "_PENDING", [])
    return folder


def _archive_option(options, name):
    found = [o for o in options.split() if o.startswith(f"-XX:{name}=")]
    return found[0].split("=", 1)[1] if found else None


def test_a_first_session_writes_the_archive_under_a_private_name(cache):
    options = _jvm.driver_options()
    assert options.startswith(_jvm.FAST_START) and "-Xlog:cds*=off" in options
    tmp = _archive_option(options, "ArchiveClassesAtExit")
    assert tmp is not None and os.path.dirname(tmp) == str(cache)
    assert tmp.endswith(f".jsa.{os.getpid()}.tmp")
    assert _jvm._PENDING == [(str(cache), os.path.basename(tmp)[:-len(f".{os.getpid()}.tmp")])]


def test_a_complete_archive_of_a_finished_writer_is_adopted_and_mapped(cache):
    tmp = _archive_option(_jvm.driver_options(), "ArchiveClassesAtExit")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    half = tmp.replace(f".{os.getpid()}.tmp", f".{dead.pid}.tmp")
    with open(half, "wb") as f:
        f.write(b"\0" * 64)  # a writer killed before the header: never adopted
    assert _archive_option(_jvm.driver_options(), "SharedArchiveFile") is None
    os.remove(half)
    with open(half, "wb") as f:
        f.write(struct.pack("<I", 0xF00BABA8) + b"\0" * 60)
    mapped = _archive_option(_jvm.driver_options(), "SharedArchiveFile")
    assert mapped == tmp[:-len(f".{os.getpid()}.tmp")] and os.path.isfile(mapped)
    assert not os.path.exists(half)


def test_a_class_path_folder_with_files_gets_no_archive(cache, tmp_path, monkeypatch):
    """The JVM cannot archive with a non-empty folder on the class path (it
    prints "Cannot have non-empty directory in paths" at exit, every run)."""
    default = os.path.basename(_archive_option(_jvm.driver_options(), "ArchiveClassesAtExit"))
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    empty = os.path.basename(_archive_option(_jvm.driver_options(), "ArchiveClassesAtExit"))
    assert empty != default  # another class path, another archive
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert _jvm.driver_options() == _jvm.FAST_START
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    assert _jvm.driver_options() == _jvm.FAST_START
    monkeypatch.delenv("HADOOP_CONF_DIR")
    monkeypatch.setenv(_jvm.ENV, "0")
    assert _jvm.driver_options() == _jvm.FAST_START


SESSION = """
import sys
from bertflow.spark import _jvm, local_session
spark = local_session("local[1]")
assert spark.range(5).count() == 5
print("options:", spark.conf.get("spark.driver.extraJavaOptions"), file=sys.stderr)
_jvm.finish(spark)
"""


def test_the_first_session_archives_quietly_and_the_next_maps_it(cache):
    env = dict(os.environ)
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "SPARK_CONF_DIR"):
        env.pop(k, None)
    runs = [subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stderr[-3000:]
        # The JVM's notes on the archive (hundreds of lines) are not printed.
        assert "[cds" not in p.stdout + p.stderr and p.stdout == "", p.stdout[-2000:]
        # Nor Spark's start-up notes on its default logging, nor Hadoop's on
        # native libraries (bertflow's log4j2.properties).
        for note in ("log4j profile", "default log level", "NativeCodeLoader"):
            assert note not in p.stderr, p.stderr[-3000:]
        assert f"-Dlog4j2.configurationFile={_jvm.LOG_CONFIG}" in p.stderr
    assert "-XX:ArchiveClassesAtExit=" in runs[0].stderr
    # The wait for the archive is said (once), not silent.
    saving = "saving the JVM's class archive"
    assert saving in runs[0].stderr and saving not in runs[1].stderr
    archives = sorted(os.listdir(cache))
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives
    assert f"-XX:SharedArchiveFile={cache / archives[0]}" in runs[1].stderr


def test_the_log_configuration_yields_to_the_users(cache, tmp_path, monkeypatch):
    """bertflow's log4j2.properties is named unless the class path has the
    user's own log4j2 configuration (Spark's template does not count)."""
    assert os.path.isfile(_jvm.LOG_CONFIG)
    assert _jvm.log_options() == f" -Dlog4j2.configurationFile={_jvm.LOG_CONFIG}"
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    (conf / "log4j2.properties.template").write_text("rootLogger.level = info\n")
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert _jvm.log_options() != ""
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert _jvm.log_options() == ""
