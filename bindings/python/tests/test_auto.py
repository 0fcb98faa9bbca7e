"""SoftWhitening, Auto and advise(): values against NumPy, the decision on
synthetic data with a known answer, scikit-learn behaviour, bad input."""

import pickle

import numpy as np
import pytest

import bertflow
from conftest import correlated


def numpy_soft(x, alpha, shrink=0.0, drop=0, blend=0.0):
    """Independent soft whitening in float64 with NumPy's eigh."""
    x = x.astype(np.float64)
    mu = x.mean(0)
    s, u = np.linalg.eigh(np.cov(x - mu, rowvar=False, ddof=1))
    order = np.argsort(s)[::-1]
    s, u = s[order], u[:, order]
    r = int(np.sum(s > 1e-10 * s[0]))
    s, u = s[:r], u[:, :r]
    sp = (1 - shrink) * s + shrink * s.mean()
    f = (sp[drop:] / sp[drop]) ** (-alpha / 2)
    z = (x - mu) @ (u[:, drop:] * f)
    if blend == 0:
        return z
    z = z @ u[:, drop:].T
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    return blend * unit(x) + (1 - blend) * unit(z)


def offset_cone(rng, scale, n=3000, d=32):
    """Gaussian with a steep spectrum, offset by `scale` along two
    low-variance directions: a narrow cone whose axis is not a main axis."""
    x = rng.normal(size=(n, d)) * np.sqrt(np.logspace(0, -3, d))
    x[:, -2:] += scale / np.sqrt(2)
    return x.astype(np.float32)


def test_soft_whitening_equals_numpy(rng):
    x = correlated(rng, 600, 12)
    for alpha, shrink, drop in [(0.0, 0.0, 0), (0.5, 0.25, 0), (1.0, 0.0, 2), (0.7, 0.5, 3)]:
        y = bertflow.SoftWhitening(alpha=alpha, shrink=shrink, drop=drop).fit_transform(x)
        ref = numpy_soft(x, alpha, shrink, drop)
        assert y.shape == ref.shape == (600, 12 - drop)
        # Eigenvector signs are arbitrary: compare the Gram matrices.
        np.testing.assert_allclose(y @ y.T, ref @ ref.T, rtol=1e-4, atol=1e-3)
    # Blended: U diag(f) U^T does not depend on the signs, compare directly.
    y = bertflow.SoftWhitening(alpha=0.7, blend=0.5).fit_transform(x)
    np.testing.assert_allclose(y, numpy_soft(x, 0.7, blend=0.5), atol=1e-5)
    assert y.shape == x.shape


def test_soft_whitening_bad_parameters(rng):
    x = correlated(rng, 100, 6)
    for kwargs, exc in [
        ({"alpha": 1.5}, ValueError),
        ({"blend": 1.0}, ValueError),
        ({"shrink": -0.1}, ValueError),
        ({"drop": -1}, ValueError),
        ({"drop": 1.5}, TypeError),
        ({"alpha": "x"}, TypeError),
    ]:
        with pytest.raises(exc):
            bertflow.SoftWhitening(**kwargs).fit(x)
    with pytest.raises(ValueError, match="drop=6"):
        bertflow.SoftWhitening(drop=6).fit(x)


def test_auto_leaves_isotropic_data_alone(rng):
    x = rng.normal(size=(2000, 16)).astype(np.float32)
    a = bertflow.Auto().fit(x)
    assert a.decision_["action"] == "identity"
    assert abs(a.stats_["mean_cosine"]) < 0.01
    np.testing.assert_array_equal(a.transform(x), x)
    advice = bertflow.advise(x)
    assert advice["expected"] == "none"
    assert advice["message"].startswith("Do not calibrate")
    assert advice["decision"] == a.decision_


def test_auto_blends_a_narrow_offset_cone(rng):
    x = offset_cone(rng, 4.0)
    a = bertflow.calibrator("auto").fit(x)
    assert isinstance(a, bertflow.Auto)
    d = a.decision_
    assert d["action"] == "soft-whiten" and d["blend"] > 0 and d["drop"] == 0
    assert a.stats_["mean_cosine"] > 0.43
    # The transform is exactly the softwhiten spec its decision names.
    same = bertflow.SoftWhitening(alpha=d["alpha"], shrink=d["shrink"], blend=d["blend"])
    np.testing.assert_array_equal(a.transform(x), same.fit_transform(x))
    advice = bertflow.advise(x)
    assert advice["expected"] == "improves" and advice["decision"] == d
    assert "softwhiten:alpha=" in advice["message"]


def test_auto_round_trips_and_clones(rng, tmp_path):
    x = offset_cone(rng, 4.0, n=500, d=16)
    a = bertflow.Auto().fit(x)
    for again in (
        pickle.loads(pickle.dumps(a)),
        bertflow.Calibrator.from_bytes(a.to_bytes()),
    ):
        assert type(again) is bertflow.Auto
        assert again.decision_ == a.decision_
        np.testing.assert_array_equal(again.transform(x), a.transform(x))
    a.save(tmp_path / "auto.safetensors")
    b = bertflow.load(tmp_path / "auto.safetensors")
    assert isinstance(b, bertflow.Auto) and b.describe() == a.describe()
    s = bertflow.calibrator("softwhiten:alpha=0.7,drop=1,blend=0.25")
    assert s.get_params() == {"alpha": 0.7, "shrink": 0.0, "drop": 1, "blend": 0.25}
    assert bertflow.calibrator(s.spec).get_params() == s.get_params()
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone

    assert sklearn and clone(s).get_params() == s.get_params()
    assert not hasattr(clone(a), "decision_")


@pytest.mark.parametrize(
    "bad, exc",
    [
        (np.zeros((1, 4), np.float32), ValueError),  # one row
        (np.ones((10, 4), np.float32), ValueError),  # constant
        (np.zeros(4, np.float32), ValueError),  # 1-D
        ("text", TypeError),
    ],
)
def test_advise_rejects_bad_input(bad, exc):
    with pytest.raises(exc):
        bertflow.advise(bad)


def test_advise_names_the_non_finite_value(rng):
    x = rng.normal(size=(50, 4)).astype(np.float32)
    x[7, 2] = np.nan
    with pytest.raises(ValueError, match="7"):
        bertflow.advise(x)
