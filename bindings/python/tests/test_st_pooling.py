"""``pooling="st"``: a sentence-transformers directory's own pipeline.

CI: the Python ``Encoder`` and Spark ``encode`` on the tiny sentence-transformers
directories (``crates/encoder/tests/fixtures/tiny-st``, made by
``scripts/reference/make_tiny_st.py``) give the vectors sentence-transformers
gave. Slow group: all-MiniLM-L6-v2 and all-mpnet-base-v2 (when fetched) with
``pooling="st"`` equal
``SentenceTransformer(dir).encode`` on the STS-B test sentences (run in a
Python with sentence-transformers, ``ST_PYTHON`` or ``.venv-ref``), and an
exported whitening or flow read back with ``pooling="st"`` equals the
calibrated vectors (issue 23 item 3).
"""

import json

import numpy as np
import pytest

import bertflow
from conftest import ROOT, spark_vectors
from test_st_export import ST_ENCODE, _run_st, _st_python

TINY = ROOT / "crates" / "encoder" / "tests" / "fixtures" / "tiny-st"


def golden(name):
    g = json.loads((TINY / name / "golden.json").read_text())
    return g["texts"], np.array(g["vectors"], dtype=np.float64)


@pytest.mark.parametrize("name,dim", [("mean-dense", 8), ("cls-multi", 6), ("legacy", 32)])
def test_encoder_st_equals_sentence_transformers(name, dim):
    texts, want = golden(name)
    enc = bertflow.Encoder(TINY / name, pooling="st", cache=False)
    assert enc.pooling == "st" and enc.dimension == dim
    got = enc.encode(texts, batch_size=3)
    assert got.shape == (len(texts), dim) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_st_on_a_plain_model_directory_is_an_error(model_dir, tmp_path):
    plain = ROOT / "crates" / "encoder" / "tests" / "fixtures" / "tiny-bert"
    with pytest.raises(ValueError, match="modules.json"):
        bertflow.Encoder(plain, pooling="st", cache=False)
    assert "st" in [n for n, _ in bertflow.POOLINGS]


def test_spark_encode_st(spark):
    import bertflow.spark as bs

    texts, want = golden("mean-dense")
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id long, text string")
    ids, X = spark_vectors(bs.encode(df, "text", model=str(TINY / "mean-dense"), pooling="st"))
    assert (ids == np.arange(len(texts))).all()
    np.testing.assert_allclose(X, want, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def stsb_all(data_dir):
    """Every distinct sentence of the STS-B test split."""
    lines = (data_dir / "STSBenchmark" / "sts-test.csv").read_text(encoding="utf-8").splitlines()
    seen = {}
    for line in lines:
        for s in line.split("\t")[5:7]:
            s = " ".join(s.split())
            if s:
                seen.setdefault(s, None)
    return list(seen)


@pytest.mark.slow
@pytest.mark.parametrize("name,dim", [("all-MiniLM-L6-v2", 384), ("all-mpnet-base-v2", 768)])
def test_st_equals_sentence_transformers(name, dim, stsb_all, tmp_path):
    exe = _st_python()
    if exe is None:
        pytest.skip("no Python with sentence-transformers (set ST_PYTHON, or create .venv-ref)")
    model_dir = ROOT / "models" / name
    if not (model_dir / "modules.json").is_file():
        pytest.skip(f"{model_dir} is missing (all-mpnet-base-v2: scripts/fetch_mpnet.sh)")
    (tmp_path / "texts.txt").write_text("\n".join(stsb_all), encoding="utf-8")
    _run_st(exe, ST_ENCODE, model_dir, tmp_path / "texts.txt", tmp_path / "z.npy", "plain",
            with_bertflow=False, tmp_path=tmp_path)
    want = np.load(tmp_path / "z.npy")
    got = bertflow.Encoder(model_dir, pooling="st", cache=False).encode(stsb_all)
    assert got.shape == want.shape == (len(stsb_all), dim)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("pooling,kind,normalize", [("last-avg", "whiten", False),
                                                    ("last-avg", "flow:levels=2,steps=8", True),
                                                    ("first-last-avg", "whiten", False)])
def test_an_export_reads_back_with_pooling_st(model_dir, stsb_all, tmp_path, pooling, kind, normalize):
    enc = bertflow.Encoder(model_dir, pooling=pooling, cache=False)
    x = enc.encode(stsb_all)
    cal = bertflow.calibrator(kind).fit(x, source=enc)
    bertflow.st.export(tmp_path / "st", model=model_dir, pooling=pooling, calibrator=cal,
                       normalize=normalize)
    want = cal.transform(x)
    if normalize:
        want = want / np.linalg.norm(want, axis=1, keepdims=True)
    got = bertflow.Encoder(tmp_path / "st", pooling="st", cache=False).encode(stsb_all)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
