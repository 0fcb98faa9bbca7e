"""Calibrators: values against NumPy, scikit-learn, files, bytes, bad input."""

import pickle

import numpy as np
import pytest

import bertflow
from conftest import correlated

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import Normalizer  # noqa: E402


def numpy_whiten(x, k=None):
    """Independent BERT-whitening: mean, covariance (n-1), eigh, W = U / sqrt(s)."""
    x = x.astype(np.float64)
    mu = x.mean(0)
    cov = np.cov(x - mu, rowvar=False, ddof=1)
    s, u = np.linalg.eigh(cov)
    order = np.argsort(s)[::-1][: k or len(s)]
    w = u[:, order] / np.sqrt(s[order])
    return (x - mu) @ w


def test_whitening_equals_numpy(rng):
    x = correlated(rng, 500, 12)
    for k in (None, 5):
        y = bertflow.Whitening(k=k).fit_transform(x)
        ref = numpy_whiten(x, k)
        assert y.shape == ref.shape and y.dtype == np.float32
        # Eigenvector signs are arbitrary: compare the Gram matrices.
        np.testing.assert_allclose(y @ y.T, ref @ ref.T, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(np.cov(y, rowvar=False), np.eye(y.shape[1]), atol=1e-4)


def test_standard_norm_equals_numpy(rng):
    x = correlated(rng, 300, 7)
    y = bertflow.StandardNorm().fit_transform(x)
    ref = (x - x.astype(np.float64).mean(0)) / x.astype(np.float64).std(0)
    np.testing.assert_allclose(y, ref, atol=1e-5)


def test_natsv_removes_top_directions(rng):
    x = correlated(rng, 400, 10)
    y = bertflow.Natsv(k=2).fit_transform(x).astype(np.float64)
    xc = x - x.astype(np.float64).mean(0)
    u = np.linalg.svd(np.cov(xc, rowvar=False))[0][:, :2]
    ref = xc - xc @ u @ u.T
    np.testing.assert_allclose(y, ref, atol=1e-3)


def test_flow_fits_deterministically(rng):
    x = correlated(rng, 256, 16)
    f = bertflow.Flow(levels=2, steps=2, width=8, epochs=2, seed=3)
    a = f.fit_transform(x)
    b = bertflow.Flow(levels=2, steps=2, width=8, epochs=2, seed=3).fit_transform(x)
    assert a.shape == x.shape and np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)
    assert f.meta_["seed"] == 3
    assert f.spec.startswith("flow:levels=2,steps=2,width=8,epochs=2")


def test_calibrator_from_spec():
    assert isinstance(bertflow.calibrator("whiten"), bertflow.Whitening)
    w = bertflow.calibrator("whiten:k=256")
    assert isinstance(w, bertflow.Whitening) and w.k == 256
    assert bertflow.calibrator("natsv:k=3").get_params() == {"k": 3}
    assert isinstance(bertflow.calibrator("sn"), bertflow.StandardNorm)
    assert bertflow.calibrator("sn+natsv:k=4").k == 4
    f = bertflow.calibrator("flow:levels=2,epochs=3,coupling=affine")
    assert isinstance(f, bertflow.Flow)
    assert (f.levels, f.epochs, f.coupling, f.steps) == (2, 3, "affine", 3)
    assert f.spec == bertflow.calibrator(f.spec).spec
    with pytest.raises(ValueError, match="invalid calibrator spec"):
        bertflow.calibrator("whitening")
    with pytest.raises(ValueError, match="k must be >= 1"):
        bertflow.calibrator("natsv:k=0")
    with pytest.raises(TypeError):
        bertflow.calibrator(5)


def test_pipeline_clone_pickle(rng):
    x = correlated(rng, 300, 16)
    pipe = Pipeline([("white", bertflow.Whitening(k=8)), ("norm", Normalizer())])
    y = pipe.fit(x).transform(x)
    assert y.shape == (300, 8)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1, atol=1e-5)
    fresh = clone(pipe)
    assert fresh.get_params()["white__k"] == 8
    assert not hasattr(fresh.named_steps["white"], "calibrator_")
    again = pickle.loads(pickle.dumps(pipe))
    np.testing.assert_array_equal(again.transform(x), y)
    pipe.set_params(white__k=4)
    assert pipe.fit_transform(x).shape == (300, 4)
    p2 = make_pipeline(bertflow.StandardNorm(), bertflow.Natsv(k=2))
    assert p2.fit_transform(x).shape == (300, 16)
    assert "Whitening(k=4)" in repr(pipe)


def test_pickle_and_bytes_round_trip(rng):
    x = correlated(rng, 200, 8)
    for c in (bertflow.Whitening(), bertflow.StandardNorm(), bertflow.Natsv(k=2),
              bertflow.SnNatsv(k=1), bertflow.Identity(),
              bertflow.Flow(levels=1, steps=1, width=4)):
        y = c.fit_transform(x)
        for again in (pickle.loads(pickle.dumps(c)), bertflow.Calibrator.from_bytes(c.to_bytes())):
            assert type(again) is type(c) and again.get_params() == c.get_params()
            np.testing.assert_array_equal(again.transform(x), y)


def test_save_load_external(rng, tmp_path):
    x = correlated(rng, 200, 8)
    w = bertflow.Whitening(k=6).fit(x)
    p = tmp_path / "w.safetensors"
    w.save(p)
    again = bertflow.load(p)
    assert isinstance(again, bertflow.Whitening) and again.k == 6
    np.testing.assert_array_equal(again.transform(x), w.transform(x))
    fp = again.meta_["external"]["fingerprint"]
    assert len(fp) == 16 and again.meta_["model"] == f"external:embeddings@{fp}"
    assert again.meta_["external"]["label"] is None
    assert again.meta_["pooling"] == "external"
    assert again.meta_["input_dim"] == 8 and again.meta_["fit_corpus_size"] == 200
    w.save(p, source="openai-3-small")
    assert bertflow.load(p).meta_["model"] == f"external:openai-3-small@{fp}"
    labelled = bertflow.StandardNorm().fit(x, source="my vectors")
    assert labelled.meta_["model"] == f"external:my vectors@{fp}"
    # The fingerprint is of the input: one value changed, another fingerprint.
    x2 = x.copy()
    x2[3, 4] += 1.0
    assert bertflow.StandardNorm().fit(x2).meta_["external"]["fingerprint"] != fp


def test_float64_and_non_contiguous_accepted(rng):
    x = correlated(rng, 200, 16)
    w = bertflow.Whitening().fit(x)
    y = w.transform(x)
    np.testing.assert_allclose(w.transform(x.astype(np.float64)), y, atol=1e-6)
    big = np.zeros((400, 32), np.float32)
    big[::2, ::2] = x
    strided = big[::2, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(w.transform(strided), y)
    np.testing.assert_array_equal(w.transform(np.asfortranarray(x)), y)
    np.testing.assert_array_equal(w.transform(x.tolist()), y)
    np.testing.assert_array_equal(bertflow.Whitening().fit(x.astype(np.float64)).transform(x), y)


@pytest.mark.parametrize(
    "bad, exc, msg",
    [
        (np.zeros(8, np.float32), ValueError, "2-D"),
        (np.zeros((2, 3, 8), np.float32), ValueError, "2-D"),
        (np.zeros((0, 8), np.float32), ValueError, "empty"),
        (np.ones((3, 5), np.float32), ValueError, "dimension mismatch"),
        ("abc", TypeError, "2-D array of numbers"),
        ([["a", "b"]], TypeError, "2-D array of numbers"),
    ],
)
def test_bad_transform_input(rng, bad, exc, msg):
    w = bertflow.Whitening().fit(correlated(rng, 50, 8))
    with pytest.raises(exc, match=msg):
        w.transform(bad)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_rows(rng, value):
    x = correlated(rng, 50, 8)
    x[7, 3] = value
    for c in (bertflow.Whitening(), bertflow.StandardNorm(), bertflow.Flow(levels=1, width=4)):
        with pytest.raises(ValueError, match="row 7, column 3"):
            c.fit(x)
    w = bertflow.Whitening().fit(correlated(rng, 50, 8))
    with pytest.raises(ValueError, match="row 7, column 3"):
        w.transform(x)
    big = np.full((2, 8), 1e300)  # float64 beyond float32: inf after the cast
    with pytest.raises(ValueError, match="non-finite"):
        w.transform(big)


def test_bad_fit_input(rng):
    with pytest.raises(ValueError, match="at least"):
        bertflow.Whitening().fit(np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        bertflow.Whitening().fit(np.ones(4))
    with pytest.raises(ValueError, match="k must be >= 1"):
        bertflow.Whitening(k=0).fit(correlated(rng, 20, 4))
    with pytest.raises(TypeError, match="k must be an int"):
        bertflow.Natsv(k="5").fit(correlated(rng, 20, 4))
    with pytest.raises(ValueError, match="flow"):
        bertflow.Flow(levels=5, width=4).fit(correlated(rng, 40, 4))
    with pytest.raises(TypeError, match="source"):
        bertflow.Whitening().fit(correlated(rng, 20, 4), source=3)


def test_not_fitted():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted"):
        bertflow.Whitening().transform(np.ones((2, 2)))
    with pytest.raises(NotFittedError):
        bertflow.Whitening().save("x.safetensors")


def test_a_failed_save_keeps_the_old_file(rng, tmp_path, monkeypatch):
    # An injected full disk (bertflow-durable's BERTFLOW_FAIL_WRITE) while saving
    # over an existing calibrator: OSError naming the path, old bytes intact,
    # no temporary file left behind.
    p = tmp_path / "w.safetensors"
    bertflow.Whitening().fit(correlated(rng, 50, 8)).save(p)
    old = p.read_bytes()
    monkeypatch.setenv("BERTFLOW_FAIL_WRITE", "w.safetensors@100")
    with pytest.raises(OSError, match="the disk is full.*old content") as e:
        bertflow.Whitening().fit(correlated(rng, 60, 8)).save(p)
    assert "w.safetensors" in str(e.value)
    assert p.read_bytes() == old
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.safetensors"]
    monkeypatch.delenv("BERTFLOW_FAIL_WRITE")
    bertflow.Whitening().fit(correlated(rng, 60, 8)).save(p)
    assert p.read_bytes() != old


def test_corrupt_and_truncated_files(rng, tmp_path):
    good = tmp_path / "good.safetensors"
    bertflow.Whitening().fit(correlated(rng, 50, 8)).save(good)
    data = good.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "header-only": data[:8],
        "garbage": bytes(rng.integers(0, 256, 300, dtype=np.uint8)),
        "empty": b"",
        "flipped": data[:-16] + bytes(16),
    }
    for name, b in cases.items():
        p = tmp_path / f"{name}.safetensors"
        p.write_bytes(b)
        if name == "flipped":
            # Zeroed tail: a valid file with other values, or rejected; never a crash.
            try:
                bertflow.load(p)
            except bertflow.CalibratorFileError:
                pass
            continue
        with pytest.raises(bertflow.CalibratorFileError, match="invalid calibrator file"):
            bertflow.load(p)
        with pytest.raises(ValueError):
            bertflow.Calibrator.from_bytes(b)
    with pytest.raises(FileNotFoundError):
        bertflow.load(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError):
        bertflow.Calibrator.from_bytes("not bytes")
