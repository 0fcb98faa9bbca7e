"""bertflow.Index: the CLI's index file from Python. Build from a NumPy array
(or sentences with an Encoder), open, search like faiss ((scores, ids)),
add; checked against NumPy's exact top-k (an independent implementation)."""

import numpy as np
import pytest

import bertflow
from conftest import SENTENCES


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _exact(x, q, k):
    """NumPy's exact cosine top-k: (scores, ids), best first."""
    s = _unit(q) @ _unit(x).T
    ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s, ids, axis=1), ids


@pytest.fixture
def data(rng):
    x = rng.standard_normal((2000, 48)).astype(np.float32)
    q = rng.standard_normal((30, 48)).astype(np.float32)
    return x, q, [f"row {i}" for i in range(len(x))]


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_build_open_search_equals_numpy_exact_top_k(tmp_path, data, quantize):
    x, q, texts = data
    path = tmp_path / "x.bfi"
    built = bertflow.Index.build(path, vectors=x, texts=texts, quantize=quantize, chunk=700)
    assert len(built) == 2000 and built.dimension == 48
    assert built.quantizer == quantize and built.model == "external"
    index = bertflow.Index.open(path, verify=True)
    want_s, want_i = _exact(x, q, 10)
    scores, ids = index.search(q, k=10, rescore=4)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert scores.shape == ids.shape == (30, 10)
    np.testing.assert_array_equal(ids, want_i)
    np.testing.assert_allclose(scores, want_s, atol=1e-5)
    # One query as a 1-D float64 array; the texts of the hits.
    s1, i1, t1 = index.search(q[0].astype(np.float64), k=3, return_texts=True)
    np.testing.assert_array_equal(i1[0], want_i[0, :3])
    assert t1 == [[texts[i] for i in want_i[0, :3]]]
    assert index.text(int(want_i[0, 0])) == texts[want_i[0, 0]]


def test_binary_codes_with_rescoring_find_the_exact_neighbours(tmp_path, data):
    x, q, texts = data
    index = bertflow.Index.build(tmp_path / "b.bfi", vectors=x, texts=texts,
                                 quantize="binary:itq=true")
    assert index.quantizer == "binary:itq=true"
    _, want = _exact(x, q, 10)
    recall = lambda ids: np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, want)])  # noqa: E731
    _, few = index.search(q, k=10, rescore=1)
    _, many = index.search(q, k=10, rescore=50)
    _, exact = index.search(q, k=10, exact=True)
    np.testing.assert_array_equal(exact, want)
    # 48 bits of 48-d Gaussian vectors: rescoring 500 of 2000 recovers nearly
    # everything; the codes' own order much less.
    assert recall(many) >= 0.95
    assert recall(few) < recall(many)
    # A wider shortlist re-ranks more codes by the query against their signs:
    # at the same number of rows rescored, it finds more.
    _, narrow = index.search(q, k=10, rescore=2, shortlist=1)
    _, wide = index.search(q, k=10, rescore=2, shortlist=16)
    assert recall(wide) > recall(narrow)
    with pytest.raises(ValueError, match="shortlist"):
        index.search(q, shortlist=0)


def test_add_appends_and_search_sees_it(tmp_path, data):
    x, q, texts = data
    path = tmp_path / "a.bfi"
    index = bertflow.Index.build(path, vectors=x[:1500], texts=texts[:1500], quantize="int8")
    assert index.add(vectors=x[1500:], texts=texts[1500:]) == 2000
    assert len(index) == 2000 and len(bertflow.Index.open(path)) == 2000
    _, want = _exact(x, q, 5)
    _, ids = index.search(q, k=5, rescore=4)
    np.testing.assert_array_equal(ids, want)


def test_k_beyond_the_index_pads_like_faiss(tmp_path, rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    index = bertflow.Index.build(tmp_path / "s.bfi", vectors=x, texts=["a", "b", "c"])
    scores, ids = index.search(x[:1], k=5)
    assert list(ids[0, 3:]) == [-1, -1] and np.all(np.isneginf(scores[0, 3:]))
    assert ids[0, 0] == 0


def test_bad_input_is_a_python_error(tmp_path, rng):
    x = rng.standard_normal((10, 8)).astype(np.float32)
    texts = [str(i) for i in range(10)]
    path = tmp_path / "e.bfi"
    with pytest.raises(ValueError, match="10 vectors for 9 sentences"):
        bertflow.Index.build(path, vectors=x, texts=texts[:9])
    with pytest.raises(ValueError, match="quantize"):
        bertflow.Index.build(path, vectors=x, texts=texts, quantize="int4")
    with pytest.raises(ValueError, match="give texts"):
        bertflow.Index.build(path, vectors=x)
    with pytest.raises(TypeError, match="NumPy array"):
        bertflow.Index.build(path, vectors=[[1.0, 2.0]], texts=["a"])
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        bertflow.Index.build(path, vectors=bad, texts=texts)
    assert not path.exists()
    index = bertflow.Index.build(path, vectors=x, texts=texts, quantize="int8")
    with pytest.raises(ValueError, match="dimension"):
        index.search(rng.standard_normal((1, 9)).astype(np.float32))
    with pytest.raises(ValueError, match="rescore"):
        index.search(x[:1], rescore=0)
    with pytest.raises(ValueError, match="encoder"):
        index.search(["a sentence"])
    with pytest.raises(ValueError, match="dimension"):
        index.add(vectors=x[:, :4], texts=texts)
    with pytest.raises(ValueError, match="row 10"):
        index.text(10)
    with pytest.raises(FileNotFoundError):
        bertflow.Index.open(tmp_path / "missing.bfi")
    (tmp_path / "junk.bfi").write_bytes(b"not an index" * 10)
    with pytest.raises(ValueError, match="corrupt"):
        bertflow.Index.open(tmp_path / "junk.bfi")
    assert len(bertflow.Index.open(path)) == 10


def test_sentences_with_an_encoder(tmp_path, encoder):
    path = tmp_path / "enc.bfi"
    index = bertflow.Index.build(path, texts=SENTENCES, encoder=encoder, quantize="int8")
    assert index.model == encoder.identity
    _, ids, texts = bertflow.Index.open(path, encoder=encoder).search(
        ["A man is playing a guitar."], k=2, return_texts=True)
    assert ids[0, 0] == 0 and texts[0][0] == SENTENCES[0]
    # The same vectors given as an array: the same answers.
    vec = encoder.encode(["A man is playing a guitar."])
    _, by_vector = index.search(vec, k=2)
    np.testing.assert_array_equal(by_vector, ids)
    assert index.add(texts=["A guitar is being played by a man."]) == len(SENTENCES) + 1
    _, ids = index.search(["A man is playing a guitar."], k=2)
    assert sorted(ids[0]) == [0, len(SENTENCES)]
