"""Compact codes in Python: bertflow.Quantizer against NumPy's own bit
packing and rounding, ITQ, pickling and scikit-learn, code scores, the
quantizer stage of a calibrator file (also through the CLI), and errors."""

import pickle

import numpy as np
import pytest

import bertflow
from conftest import correlated


def test_binary_codes_are_numpy_packbits(rng):
    x = correlated(rng, 50, 70)
    u = bertflow.Quantizer("ubinary").fit(x).transform(x)
    assert u.dtype == np.uint8 and u.shape == (50, 9)
    np.testing.assert_array_equal(u, np.packbits(x > 0, axis=1))
    # sentence-transformers' "binary": packbits - 128 as int8
    b = bertflow.Quantizer("binary").fit_transform(x)
    assert b.dtype == np.int8
    np.testing.assert_array_equal(b, (np.packbits(x > 0, axis=1).astype(np.int16) - 128).astype(np.int8))


def test_int8_global_and_per_dimension_ranges(rng):
    x = correlated(rng, 80, 12)
    q = bertflow.Quantizer("int8").fit(x)
    s = np.abs(x).max() / 127.0
    np.testing.assert_array_equal(q.transform(x), np.clip(np.round(x / s), -127, 127).astype(np.int8))
    u = bertflow.Quantizer("uint8").fit(x).transform(x)
    np.testing.assert_array_equal(u.astype(np.int16) - 128, q.transform(x))
    qd = bertflow.Quantizer("uint8", ranges="dim").fit(x)
    d = qd.transform(x)
    assert d.min(axis=0).tolist() == [0] * 12 and d.max(axis=0).tolist() == [255] * 12
    step = (x.max(axis=0) - x.min(axis=0)) / 255
    assert np.all(np.abs(qd.inverse_transform(d) - x) <= step / 2 + 1e-6)
    np.testing.assert_allclose(q.inverse_transform(q.transform(x)), q.transform(x) * s, rtol=1e-6)
    with pytest.raises(ValueError, match="bytes per row"):
        qd.inverse_transform(d[:, :5])


def test_itq_objective_never_increases(rng):
    x = correlated(rng, 300, 16)
    q = bertflow.Quantizer("binary", itq=True, iters=20).fit(x)
    obj = np.array(q.objective_)
    assert len(obj) == 21 and obj[-1] < obj[0]
    assert np.all(np.diff(obj) <= 1e-9 * obj[:-1])


def test_sklearn_shape_and_pickling(rng):
    x = correlated(rng, 60, 24)
    q = bertflow.Quantizer("binary", itq=True, iters=5)
    assert q.get_params() == {"kind": "binary", "ranges": "global", "itq": True, "iters": 5,
                              "m": None, "opq": True, "opq_iters": None}
    with pytest.raises(bertflow._calibrators.NotFittedError):
        q.transform(x)
    assert q.fit(x) is q and q.code_bytes_ == 3 and q.n_features_in_ == 24
    again = pickle.loads(pickle.dumps(q))
    np.testing.assert_array_equal(again.transform(x), q.transform(x))
    try:
        from sklearn.base import clone
    except ImportError:  # pragma: no cover
        return
    c = clone(q)
    assert c.get_params() == q.get_params() and not hasattr(c, "quantizer_")


def test_code_scores(rng):
    x = correlated(rng, 30, 70)
    u = bertflow.Quantizer("ubinary").fit_transform(x)
    bits = np.unpackbits(u, axis=1)[:, :70]
    h = (bits[:, None, :] != bits[None, :, :]).sum(-1)
    np.testing.assert_allclose(bertflow.hamming_similarity(u, u, dim=70), 1 - 2 * h / 70)
    b = bertflow.Quantizer("binary").fit_transform(x)  # int8 form: the same distances
    np.testing.assert_allclose(bertflow.hamming_similarity(b, b, dim=70), 1 - 2 * h / 70)
    assert bertflow.hamming_similarity(u[0], u[1], dim=70) == pytest.approx(1 - 2 * h[0, 1] / 70)
    c = bertflow.Quantizer("int8").fit_transform(x)
    np.testing.assert_array_equal(bertflow.int8_dot(c, c[:5]), c.astype(np.int32) @ c[:5].astype(np.int32).T)
    with pytest.raises(ValueError, match="different widths"):
        bertflow.hamming_similarity(u, u[:, :8])
    with pytest.raises(TypeError, match="int8 codes"):
        bertflow.int8_dot(u, u)
    with pytest.raises(TypeError):
        bertflow.hamming_similarity(x, x)


def test_a_calibrator_ending_in_a_quantizer(rng, tmp_path, run_cli):
    x = correlated(rng, 400, 32)
    c = bertflow.Pca(k=16).fit(x, quantize="binary:itq=true,iters=5")
    assert c.quantizer_.spec == "binary:itq=true,iters=5"
    codes = c.transform(x, quantize=True)
    assert codes.dtype == np.int8 and codes.shape == (400, 2)
    np.testing.assert_array_equal(codes, c.quantizer_.transform(c.transform(x)))
    path = tmp_path / "p.safetensors"
    c.save(path)
    again = bertflow.load(path)
    np.testing.assert_array_equal(again.transform(x, quantize=True), codes)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(c)).transform(x, quantize=True), codes)
    # The CLI writes the same codes from the same file.
    np.save(tmp_path / "x.npy", x)
    run_cli("transform", "-c", path, "-i", tmp_path / "x.npy", "-o", tmp_path / "c.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), codes)
    # A quantizer fitted on the output itself, or given fitted.
    q8 = c.transform(x, quantize="int8")
    assert q8.dtype == np.int8 and q8.shape == (400, 16)
    q = bertflow.Quantizer("uint8").fit(c.transform(x))
    np.testing.assert_array_equal(c.transform(x, quantize=q), q.transform(c.transform(x)))
    plain = bertflow.Pca(k=16).fit(x)
    with pytest.raises(ValueError, match="no quantizer stage"):
        plain.transform(x, quantize=True)
    with pytest.raises(ValueError, match="expects 32 columns, got 16"):
        bertflow.Quantizer("int8").fit(x).transform(x[:, :16])


def test_pq_codes_reconstruct_and_round_trip(rng, tmp_path):
    x = correlated(rng, 600, 16)
    q = bertflow.Quantizer("pq", m=4, opq_iters=3).fit(x)
    assert q.spec == "pq:m=4,opq=true,iters=3" and q.code_bytes_ == 4
    codes = q.transform(x)
    assert codes.dtype == np.uint8 and codes.shape == (600, 4)
    obj = q.objective_
    assert len(obj) == 4 and all(b <= a * (1 + 1e-6) for a, b in zip(obj, obj[1:]))
    err = ((q.inverse_transform(codes) - x) ** 2).sum(axis=1).mean()
    plain = bertflow.Quantizer("pq", m=4, opq=False).fit(x)
    assert plain.spec == "pq:m=4,opq=false"
    # 256 centroids per 4-dim sub-vector: far below the data's energy.
    assert err < 0.2 * (x ** 2).sum(axis=1).mean()
    again = pickle.loads(pickle.dumps(q))
    np.testing.assert_array_equal(again.transform(x), codes)
    np.testing.assert_array_equal(again.inverse_transform(codes), q.inverse_transform(codes))
    # A calibrator ending in pq, saved and loaded: the same codes.
    c = bertflow.Pca().fit(x, quantize="pq:m=4")
    path = tmp_path / "pq.safetensors"
    c.save(path)
    np.testing.assert_array_equal(bertflow.load(path).transform(x, quantize=True),
                                  c.transform(x, quantize=True))
    with pytest.raises(ValueError, match="does not divide the dimension 16"):
        bertflow.Quantizer("pq", m=5).fit(x)
    with pytest.raises(ValueError, match="pq needs m"):
        bertflow.Quantizer("pq").fit(x)
    with pytest.raises(ValueError, match="bytes per row"):
        q.inverse_transform(codes[:, :3])


def test_pca_is_a_rotation(rng):
    x = correlated(rng, 300, 20)
    y = bertflow.Pca().fit_transform(x)
    def cos(m):
        n = m / np.linalg.norm(m, axis=1, keepdims=True)
        return n @ n.T
    np.testing.assert_allclose(cos(y), cos(x), atol=1e-5)
    assert bertflow.Pca(k=5, centre="true").fit(x).spec == "pca:k=5,centre=true"


def test_spark_writes_the_codes_of_a_file_with_a_stage(spark, rng):
    import bertflow.spark as bs
    from pyspark.sql import types as T

    x = correlated(rng, 120, 24)
    c = bertflow.Pca(k=16).fit(x, quantize="binary:itq=true,iters=5")
    rows = [(i, x[i].tolist() if i != 7 else None) for i in range(len(x))]
    schema = T.StructType([T.StructField("id", T.LongType()),
                           T.StructField("embedding", T.ArrayType(T.FloatType()))])
    df = spark.createDataFrame(rows, schema).repartition(3)
    out = bs.transform(df, "embedding", c, output_col="codes")
    assert isinstance(out.schema["codes"].dataType, T.BinaryType)
    got = {r["id"]: r["codes"] for r in out.select("id", "codes").collect()}
    want = c.transform(x, quantize=True)
    assert got[7] is None
    for i in range(len(x)):
        if i != 7:
            np.testing.assert_array_equal(np.frombuffer(got[i], dtype=np.int8), want[i])
