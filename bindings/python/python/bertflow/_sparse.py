"""Sparse (SPLADE, BGE-M3) and multi-vector (ColBERT-style) outputs."""

import numpy as _np

from . import _bertflow


def _rows(indptr, indices, values):
    return [(indices[a:b].copy(), values[a:b].copy()) for a, b in zip(indptr[:-1], indptr[1:])]


def _sparse(parts, dim):
    """A ``scipy.sparse.csr_matrix`` when SciPy is installed, else a list of
    ``(indices, values)`` pairs of NumPy arrays."""
    indptr, indices, values = parts
    try:
        import scipy.sparse as sp
    except ImportError:
        return _rows(indptr, indices, values)
    return sp.csr_matrix((values, indices, indptr), shape=(len(indptr) - 1, dim))


def _pairs(embeddings):
    """``(indices, values)`` rows of a CSR matrix, one pair, or a list of pairs."""
    if hasattr(embeddings, "tocsr"):
        m = embeddings.tocsr()
        m.sort_indices()
        return _rows(m.indptr, m.indices, m.data), False
    if isinstance(embeddings, tuple) and len(embeddings) == 2 and not isinstance(embeddings[0], tuple):
        return [embeddings], True
    return list(embeddings), False


class SparseEncoder:
    """Sparse and per-token vectors of a model with retrieval heads.

    Args:
        model: A directory in Hugging Face layout (or a hub id in the local
            cache): a ``*ForMaskedLM`` checkpoint (SPLADE: ``log(1 + relu(logits))``
            max-pooled over the tokens), a BGE-M3-shaped directory
            (``sparse_linear.pt`` and ``colbert_linear.pt`` beside XLM-RoBERTa
            weights), or any encoder (per-token vectors only).
        max_len, threads, batch_size, precision, cache_dir: as :class:`Encoder`.

    Example::

        enc = bertflow.SparseEncoder("crates/encoder/tests/fixtures/tiny-bert-splade")
        X = enc.encode(["a man plays the guitar"])      # scipy.sparse.csr_matrix
        enc.decode(X, top_k=3)                           # [[(token, weight), ...]]
    """

    def __init__(self, model, max_len=None, threads=None, batch_size=32, precision=None, cache_dir=None):
        self._r = _bertflow.Retriever(str(model), max_len, threads, batch_size, precision, cache_dir)

    @property
    def vocab_size(self):
        """The sparse vectors' dimension."""
        return self._r.sparse_dim

    @property
    def sparse_kind(self):
        """``"splade"``, ``"bge-m3"`` or None (no sparse head)."""
        return self._r.sparse_kind

    def encode(self, texts, max_active_dims=None):
        """Sparse vectors of ``texts``: a ``scipy.sparse.csr_matrix`` (one row a
        text, one column a vocabulary entry), or, without SciPy, a list of
        ``(indices, values)`` NumPy arrays. ``max_active_dims`` keeps the
        largest entries of each."""
        return _sparse(self._r.encode_sparse(texts, max_active_dims), self.vocab_size)

    def encode_multi(self, texts, skip_first=None, query_length=None):
        """Per-token vectors (L2-normalised; through ``colbert_linear.pt`` when
        the model has one): a list of ``[tokens, dim]`` float32 arrays.
        ``skip_first`` drops the first token's (default: True with
        ``colbert_linear.pt``); ``query_length`` pads queries with the mask token."""
        return self._r.encode_multi(texts, skip_first, query_length)

    def encode_all(self, texts, outputs="dense,sparse,multi", max_active_dims=None, skip_first=None,
                   query_length=None):
        """The outputs of one forward pass: a dict with ``dense`` (normalised
        first-token vectors), ``sparse`` (as :meth:`encode`), ``multi`` (as
        :meth:`encode_multi`), each when asked for in ``outputs``."""
        got = self._r.encode(texts, outputs, max_active_dims, skip_first, query_length)
        if "sparse" in got:
            got["sparse"] = _sparse(got["sparse"], self.vocab_size)
        return got

    def decode(self, embeddings, top_k=None):
        """The largest entries as ``(token, weight)`` pairs, largest first, as
        sentence-transformers' ``SparseEncoder.decode``: a list per row of a
        matrix (or list of pairs), one list for one ``(indices, values)`` pair."""
        rows, single = _pairs(embeddings)
        out = [self._r.decode(_np.asarray(i, dtype=_np.int64).tolist(),
                              _np.asarray(v, dtype=_np.float32).tolist(), top_k) for i, v in rows]
        return out[0] if single else out

    def rerank(self, query, texts, query_length=None):
        """``texts`` ranked against ``query`` by late interaction (MaxSim of
        per-token vectors): ``[{"index", "score"}]``, best first."""
        scores = self._r.late_interaction(query, texts, query_length)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [{"index": i, "score": scores[i]} for i in order]

    def __repr__(self):
        return f"SparseEncoder({self._r.model_id!r}, sparse={self.sparse_kind!r})"


def decode_sparse(encoder, embeddings, top_k=None):
    """``encoder.decode(embeddings, top_k)`` (:meth:`SparseEncoder.decode`)."""
    return encoder.decode(embeddings, top_k)


def maxsim(query, doc):
    """ColBERT's MaxSim: for each query vector the largest dot product with a
    document vector, summed."""
    q = _np.ascontiguousarray(query, dtype=_np.float32)
    d = _np.ascontiguousarray(doc, dtype=_np.float32)
    return _bertflow.maxsim_score(q, d)
