"""``bertflow.SparseEncoder`` on the tiny SPLADE and BGE-M3-shaped checkpoints
of crates/encoder/tests/fixtures (references in golden.json, made by
scripts/reference/make_tiny_sparse.py): SciPy CSR matrices (or (indices,
values) pairs without SciPy), ``max_active_dims``, ``decode_sparse`` naming the
tokens as sentence-transformers' ``SparseEncoder.decode``, per-token vectors,
the three BGE-M3 outputs of one pass, MaxSim, and the errors."""

import json

import numpy as np
import pytest

import bertflow
from conftest import ROOT

FIXTURES = ROOT / "crates" / "encoder" / "tests" / "fixtures"


def golden(name):
    return json.loads((FIXTURES / f"tiny-{name}" / "golden.json").read_text())


def dense(v, dim):
    out = np.zeros(dim)
    out[v["indices"]] = v["values"]
    return out


def rows_of(x, dim):
    if hasattr(x, "toarray"):
        return x.toarray()
    out = np.zeros((len(x), dim))
    for r, (i, v) in enumerate(x):
        out[r, i] = v
    return out


def test_splade_vectors_equal_the_reference():
    g = golden("bert-splade")
    enc = bertflow.SparseEncoder(FIXTURES / "tiny-bert-splade")
    assert enc.sparse_kind == "splade" and enc.vocab_size == g["vocab_size"]
    texts = [c["text"] for c in g["cases"]]
    x = enc.encode(texts)
    try:
        import scipy.sparse as sp

        assert isinstance(x, sp.csr_matrix) and x.shape == (len(texts), g["vocab_size"])
    except ImportError:
        assert isinstance(x, list) and len(x[0]) == 2
    got = rows_of(x, g["vocab_size"])
    want = np.stack([dense(c["sparse"], g["vocab_size"]) for c in g["cases"]])
    assert np.abs(got - want).max() < 1e-5
    top = rows_of(enc.encode(texts, max_active_dims=3), g["vocab_size"])
    assert (np.count_nonzero(top, axis=1) == 3).all()
    decoded = bertflow.decode_sparse(enc, x, top_k=3)
    for d, c in zip(decoded, g["cases"]):
        assert [t for t, _ in d] == [t for t, _ in c["decode3"]]
        assert np.allclose([w for _, w in d], [w for _, w in c["decode3"]], atol=1e-5)


def test_bge_m3_gives_three_outputs_and_maxsim():
    g = golden("bge-m3")
    enc = bertflow.SparseEncoder(FIXTURES / "tiny-bge-m3")
    texts = [c["text"] for c in g["cases"]]
    out = enc.encode_all(texts)
    assert np.abs(out["dense"] - np.array([c["dense"] for c in g["cases"]])).max() < 1e-5
    got = rows_of(out["sparse"], g["vocab_size"])
    want = np.stack([dense(c["sparse"], g["vocab_size"]) for c in g["cases"]])
    assert np.abs(got - want).max() < 1e-5
    for m, c in zip(out["multi"], g["cases"]):
        assert np.abs(m - np.array(c["colbert"])).max() < 1e-5
    q, d = np.array(g["cases"][1]["colbert"]), np.array(g["cases"][0]["colbert"])
    want = (q @ d.T).max(axis=1).sum()
    assert abs(bertflow.maxsim(q, d) - want) < 1e-4
    ranked = enc.rerank(texts[1], [texts[0], texts[3]])
    assert {r["index"] for r in ranked} == {0, 1}
    assert ranked[0]["score"] >= ranked[1]["score"]


def test_errors_are_clear():
    enc = bertflow.SparseEncoder(FIXTURES / "tiny-bert-splade")
    with pytest.raises(Exception, match="max_active_dims"):
        enc.encode(["a"], max_active_dims=0)
    with pytest.raises(ValueError, match="unknown output"):
        enc.encode_all(["a"], outputs="dense,bogus")
    with pytest.raises(ValueError, match="no sparse head"):
        bertflow.SparseEncoder(FIXTURES / "tiny-bert").encode(["a"])
