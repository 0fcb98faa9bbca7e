"""bertflow.MomentStats: merged partial statistics equal the one-shot fit."""

import pickle

import numpy as np
import pytest

import bertflow
from conftest import correlated


@pytest.mark.parametrize("spec", ["whiten", "whiten:k=5", "sn", "natsv:k=3", "sn+natsv:k=2"])
def test_eight_merged_parts_equal_one_shot(rng, spec):
    x = correlated(rng, 4000, 24)
    one_shot = bertflow.calibrator(spec).fit(x)
    parts = []
    bounds = np.sort(rng.choice(np.arange(1, len(x)), 7, replace=False))
    for chunk in np.split(x, bounds):
        s = bertflow.MomentStats(24)
        for sub in np.array_split(chunk, 3):  # several updates per part
            s.update(sub)
        parts.append(pickle.loads(pickle.dumps(s)))  # as shipped between workers
    merged = bertflow.MomentStats.from_bytes(parts[0].to_bytes())
    for p in parts[1:]:
        merged.merge(p)
    assert merged.count == len(x) and merged.dim == 24
    fitted = merged.fit(spec)
    assert type(fitted) is type(one_shot) and fitted.spec == one_shot.spec
    assert fitted.meta_["fit_corpus_size"] == len(x)
    y1, y2 = one_shot.transform(x), fitted.transform(x)
    if spec.startswith("whiten"):  # eigenvector signs may differ
        np.testing.assert_allclose(y1 @ y1[:200].T, y2 @ y2[:200].T, atol=1e-3, rtol=1e-4)
    else:
        np.testing.assert_allclose(y1, y2, atol=1e-5)


def test_statistics_equal_numpy(rng):
    x = correlated(rng, 777, 9)
    s = bertflow.MomentStats(9).update(x[:300]).update(x[300:].astype(np.float64))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(s.mean, x64.mean(0), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(s.covariance(), np.cov(x64, rowvar=False), rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(s.comoment(), np.cov(x64, rowvar=False) * 776, rtol=1e-10, atol=1e-8)
    c = s.copy().update(x[:10])
    assert c.count == 787 and s.count == 777
    assert repr(s) == "MomentStats(dim=9, count=777)"


def test_float64_and_strided_input(rng):
    x = correlated(rng, 100, 6)
    a = bertflow.MomentStats(6).update(x)
    wide = np.zeros((100, 12), np.float32)
    wide[:, ::2] = x
    b = bertflow.MomentStats(6).update(wide[:, ::2]).update(np.zeros((0, 6)))
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.comoment(), b.comoment())
    c = bertflow.MomentStats(6).update(x.astype(np.float64).T.copy().T)  # Fortran order
    np.testing.assert_allclose(a.comoment(), c.comoment(), rtol=1e-12)


def test_bad_input(rng):
    s = bertflow.MomentStats(4).update(correlated(rng, 10, 4))
    before = s.to_bytes()
    with pytest.raises(ValueError, match="4"):
        s.update(np.ones((3, 5), np.float32))
    x = np.ones((3, 4))
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match="row 2, column 1"):
        s.update(x)
    with pytest.raises(ValueError, match="2-D"):
        s.update(np.ones(4))
    with pytest.raises(ValueError, match="2-D"):
        s.update(np.ones((2, 2, 4)))
    assert s.to_bytes() == before  # unchanged by the failed updates
    with pytest.raises(ValueError):
        s.merge(bertflow.MomentStats(5))
    with pytest.raises(TypeError):
        s.merge(np.ones((2, 4)))
    with pytest.raises(ValueError, match="flow"):
        s.fit("flow")
    with pytest.raises(ValueError, match="at least"):
        bertflow.MomentStats(4).fit("whiten")
    with pytest.raises(ValueError, match="dim"):
        bertflow.MomentStats(0)
    with pytest.raises(TypeError):
        bertflow.MomentStats(2.5)
    for bad in (before[:-3], before[:10], b"", before[:20] + bytes(len(before) - 20)):
        with pytest.raises(ValueError, match="moment"):
            bertflow.MomentStats.from_bytes(bad)
