"""`bertflow.Reranker` on the tiny random cross-encoders of
crates/encoder/tests/fixtures (one per family, made with transformers by
scripts/reference/make_tiny_rerankers.py): `predict` equals transformers'
logits stored beside them (golden.json) for single texts and pairs, a
truncated pair included; `rerank` answers as text-embeddings-inference's
/rerank (sorted dicts, sigmoid or raw scores, text on request); errors for an
embedding model, a two-label model, too-long inputs and bad arguments."""

import json
import math

import numpy as np
import pytest

import bertflow
from conftest import ROOT

FIXTURES = ROOT / "crates" / "encoder" / "tests" / "fixtures"
FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "distilbert", "mpnet", "modernbert"]


def golden(family):
    d = FIXTURES / f"tiny-{family}-cls"
    return d, json.loads((d / "golden.json").read_text())


def inputs(g):
    return [c["text"] if c["pair"] is None else (c["text"], c["pair"]) for c in g["cases"]]


@pytest.mark.parametrize("family", FAMILIES)
def test_predict_equals_transformers(family):
    d, g = golden(family)
    rr = bertflow.Reranker(d, threads=2, batch_size=3)
    assert rr.labels == g["labels"]
    assert rr.max_len == g["max_len"]
    assert rr.architecture == g["class"]
    got = rr.predict(inputs(g))
    want = np.array([c["logits"] for c in g["cases"]], np.float32)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # Lists work as pairs too.
    pair = [list(p) if isinstance(p, tuple) else p for p in inputs(g)]
    np.testing.assert_array_equal(rr.predict(pair), got)


def test_rerank_answers_as_tei():
    d, g = golden("roberta")
    case = g["cases"][6]  # (query, long text): cut by truncation
    query, long = case["text"], case["pair"]
    texts = ["Hi", long, "a dog is running in the park"]
    rr = bertflow.Reranker(str(d))
    raw = rr.rerank(query, texts, raw_scores=True)
    assert sorted(r["index"] for r in raw) == [0, 1, 2]
    assert all(set(r) == {"index", "score"} for r in raw)
    assert [r["score"] for r in raw] == sorted((r["score"] for r in raw), reverse=True)
    by_index = {r["index"]: r["score"] for r in raw}
    assert abs(by_index[1] - case["logits"][0]) < 1e-5
    sig = rr.rerank(query, texts, return_text=True)
    assert [r["index"] for r in sig] == [r["index"] for r in raw]
    for s in sig:
        assert s["text"] == texts[s["index"]]
        assert abs(s["score"] - 1 / (1 + math.exp(-by_index[s["index"]]))) < 1e-6
    # Too long without truncation.
    with pytest.raises(ValueError, match="too long"):
        rr.rerank(query, texts, truncate=False)
    assert len(rr.rerank(query, texts[:1], truncate=False)) == 1


def test_errors():
    d, _ = golden("bert")
    with pytest.raises(ValueError, match="2 labels"):
        bertflow.Reranker(d).rerank("q", ["t"])
    emb = FIXTURES / "tiny-roberta"
    with pytest.raises(ValueError, match="is an embedding model; it has no classification head"):
        bertflow.Reranker(emb)
    assert not bertflow.is_reranker(emb)
    assert bertflow.is_reranker(d)
    with pytest.raises(ValueError, match="is a reranker"):
        bertflow.Encoder(str(d))
    rr = bertflow.Reranker(FIXTURES / "tiny-mpnet-cls")
    with pytest.raises(TypeError, match="single str"):
        rr.rerank("q", "a text")
    with pytest.raises(ValueError, match="empty"):
        rr.rerank("q", [])
    with pytest.raises(TypeError, match=r"pairs\[1\]"):
        rr.predict(["a", ("b", 3)])
    with pytest.raises(ValueError, match="empty"):
        rr.predict([])
    with pytest.raises(ValueError, match="batch_size"):
        bertflow.Reranker(d, batch_size=0)
