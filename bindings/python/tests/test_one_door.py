"""One door (issues 34 and 36): Python takes its defaults, ranges and
calibrator checks from core, exactly as the CLI; Spark applies a calibrator
through the same pipeline; st.calibrate puts a calibrator where it sees the
vectors it was fitted on."""

import os
import subprocess
import sys

import numpy as np
import pytest

import bertflow
import bertflow.spark as bs
from bertflow.st import insertion_point
from conftest import MODEL, ROOT, SENTENCES, spark_vectors


@pytest.fixture(scope="module")
def fla_calibrator(run_cli, tmp_path_factory):
    """An sn calibrator fitted by the CLI on first-last-avg vectors."""
    d = tmp_path_factory.mktemp("fla")
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    cal = d / "sn.safetensors"
    run_cli("fit", "--model", MODEL, "--pooling", "first-last-avg", "--kind", "sn",
            "--on", corpus, "-o", cal, "--no-cache")
    return cal, corpus


def test_defaults_are_cores():
    d = bertflow.defaults()
    assert d["pooling"] == "last-avg"
    assert d["batch_size"] == 32
    assert d["sample_seed"] == 42
    assert d["precision"] == "fp32" and d["weighting"] == "mean"
    assert os.path.samefile(d["model"], MODEL)
    assert "BERTFLOW_MODEL" in d["env"] and "BERTFLOW_THREADS" in d["env"]
    assert "BERTFLOW_PRECISION" in d["env"] and d["model_dir"] == "models/all-MiniLM-L6-v2"
    # The Encoder's docstring states core's defaults, filled in from them.
    doc = bertflow.Encoder.__doc__
    assert "``models/all-MiniLM-L6-v2`` in the working directory" in doc
    assert '``"last-avg"``.' in doc and "{pooling}" not in doc and "{model_dir}" not in doc


def test_a_calibrator_file_brings_its_pooling(fla_calibrator, run_cli, tmp_path):
    cal, corpus = fla_calibrator
    enc = bertflow.Encoder(MODEL, calibrator=cal, cache=False)
    assert enc.pooling == "first-last-avg"
    got = enc.encode(SENTENCES)
    out = tmp_path / "cli.npy"
    run_cli("encode", "--model", MODEL, "--calibrator", cal, "-i", corpus, "-o", out,
            "--no-cache")
    want = np.load(out)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5


def test_a_pooling_conflict_names_the_setting(fla_calibrator):
    cal, _ = fla_calibrator
    with pytest.raises(ValueError, match=r"pooling: .*fitted with pooling first-last-avg, not last-avg"):
        bertflow.Encoder(MODEL, pooling="last-avg", calibrator=cal, cache=False)
    enc = bertflow.Encoder(MODEL, pooling="last-avg", calibrator=cal, allow_mismatch=True,
                           cache=False)
    assert enc.pooling == "last-avg"


def test_a_calibrator_object_is_checked_too(encoder):
    X = encoder.encode(SENTENCES)
    cal = bertflow.StandardNorm().fit(X, source=encoder)
    enc = bertflow.Encoder(MODEL, calibrator=cal, cache=False)
    assert np.abs(enc.encode(SENTENCES) - cal.transform(X)).max() <= 1e-5
    with pytest.raises(ValueError, match="pooling"):
        bertflow.Encoder(MODEL, pooling="cls", calibrator=cal, cache=False)
    with pytest.raises(TypeError, match="calibrator must be"):
        bertflow.Encoder(MODEL, calibrator=3.5, cache=False)


def test_ranges_are_cores(encoder):
    with pytest.raises(ValueError, match=r"threads: must be at least 1, got 0"):
        bertflow.Encoder(MODEL, threads=0, cache=False)
    with pytest.raises(ValueError, match=r"batch_size: must be at least 1"):
        encoder.encode(SENTENCES, batch_size=0)


def test_precision_from_the_environment_is_cores(tmp_path):
    # BERTFLOW_PRECISION is resolved by core, as for the CLI: the default of
    # Encoder(precision=None), and a bad value is a ValueError naming it.
    env = dict(os.environ, BERTFLOW_PRECISION="int8")
    code = ("import bertflow; print(bertflow.Encoder(%r, cache=False).precision, "
            "bertflow.defaults()['precision'])" % str(MODEL))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["int8", "int8"]
    env["BERTFLOW_PRECISION"] = "fp16"
    code = "import bertflow; bertflow.Encoder(%r, precision='fp32', cache=False)" % str(MODEL)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode != 0
    assert 'ValueError: precision: $BERTFLOW_PRECISION is "fp16"; valid: fp32, int8' in p.stderr


def test_normalize(encoder):
    Z = encoder.encode(SENTENCES, normalize=True)
    X = encoder.encode(SENTENCES)
    assert np.allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-5)
    assert np.allclose(Z, X / np.linalg.norm(X, axis=1, keepdims=True), atol=1e-6)


def test_defaults_resolve_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "BERTFLOW_MODEL"}
    code = ("import bertflow; e = bertflow.Encoder(cache=False); "
            "print(e.dimension, bertflow.defaults()['data'])")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    dim, data = p.stdout.split()
    assert dim == "384"
    if "BERTFLOW_DATA" not in os.environ:
        assert os.path.isdir(os.path.join(data, "STS16")), data


def test_docstring_lists_every_pooling_and_model_type():
    doc = bertflow.Encoder.__doc__
    for name, _ in bertflow.POOLINGS:
        assert repr(name) in doc, name
    for t in bertflow._bertflow.model_types():
        assert t in doc, t


class _Module:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _modules(*names, mode="pooling_mode_mean_tokens"):
    out = []
    for n in names:
        cls = type(n, (_Module,), {})
        out.append(cls(**({mode: True} if n == "Pooling" else {})))
    return out


def test_st_insertion_point():
    mods = _modules("Transformer", "Pooling", "Normalize")
    assert insertion_point(mods, {"pooling": "last-avg"}) == 2
    assert insertion_point(mods, {"pooling": "st"}) == 3
    with pytest.raises(ValueError, match="pools cls"):
        insertion_point(_modules("Transformer", "Pooling", mode="pooling_mode_cls_token"),
                        {"pooling": "last-avg"})
    with pytest.raises(ValueError, match="changes them after pooling"):
        insertion_point(_modules("Transformer", "Pooling", "Dense"), {"pooling": "last-avg"})
    with pytest.raises(ValueError, match="no single Pooling"):
        insertion_point(_modules("Transformer"), {"pooling": "cls"})


def test_st_calibrate_equals_the_cli(encoder, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    X = encoder.encode(SENTENCES)
    cal = bertflow.Whitening().fit(X, source=encoder)
    model = bertflow.st.calibrate(st.SentenceTransformer(str(MODEL), device="cpu"), cal)
    names = [type(m).__name__ for m in model]
    assert names[-1] == "Normalize" and names[-2] == "Calibrator"
    got = model.encode(SENTENCES)
    want = cal.transform(X)
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert np.abs(got - want).max() <= 1e-4


def test_spark_applies_a_calibrator_through_the_pipeline(spark, fla_calibrator, run_cli, tmp_path):
    cal, corpus = fla_calibrator
    df = spark.createDataFrame([(i, s) for i, s in enumerate(SENTENCES)], "id long, text string")
    ids, X = spark_vectors(bs.encode(df, model=MODEL, calibrator=cal))
    out = tmp_path / "cli.npy"
    run_cli("encode", "--model", MODEL, "--calibrator", cal, "-i", corpus, "-o", out,
            "--no-cache")
    assert np.abs(X - np.load(out)[ids]).max() <= 1e-5
    with pytest.raises(Exception, match="fitted with pooling first-last-avg"):
        spark_vectors(bs.encode(df, model=MODEL, pooling="last-avg", calibrator=cal))


def test_small_fits_warn_and_are_recorded(encoder):
    X = encoder.encode(SENTENCES)  # 12 rows of 384 dimensions
    with pytest.warns(UserWarning, match="fewer than their 384 dimensions"):
        w = bertflow.Whitening().fit(X, source=encoder)
    assert any("fewer than" in m for m in w.meta_["warnings"])
    again = bertflow.load(_roundtrip(w))
    assert again.meta_["warnings"] == w.meta_["warnings"]


def _roundtrip(cal):
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "c.safetensors")
    cal.save(path)
    return path


def test_spark_applies_cores_rules_without_restating_them():
    # The sample size's range and the empty-text rule are core's (the same
    # words as the CLI's --sample and --empty); checked before any Spark work.
    with pytest.raises(ValueError, match=r"sample_size 0: sample: must be at least 1"):
        bs.fit(None, "embedding", "flow", sample_size=0)
    with pytest.raises(TypeError, match="sample_size must be an int"):
        bs.fit(None, "embedding", "flow", sample_size=2.5)
    from bertflow import _bertflow
    assert tuple(_bertflow.EMPTY_RULES) == ("error", "skip", "keep")
    texts = ["a", " ", None, "", "b"]
    assert _bertflow.keep_rows(texts, "skip", str) == [True, False, True, False, True]
    with pytest.raises(ValueError, match=r"^empty: row 1: empty text; `skip` drops"):
        _bertflow.keep_rows(texts, "error", lambda i: f"row {i}")
    # Input formats by extension: the CLI's rule (.json read as JSON lines too).
    for p, jsonl in [("a.jsonl", True), ("a.NDJSON", True), ("d/a.json", True),
                     ("a.txt", False), ("a", False), ("a.parquet", False)]:
        assert _bertflow.is_jsonl_path(p) is jsonl, p
