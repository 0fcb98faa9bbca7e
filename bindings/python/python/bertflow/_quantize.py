"""Compact codes: :class:`Quantizer` (int8, uint8, binary, ubinary, pq, fitted
on the corpus, in the scikit-learn shape) and the scores of code arrays,
:func:`hamming_similarity` and :func:`int8_dot`. A calibrator file may end in
a quantizer stage (``bertflow fit --quantize``, ``Calibrator.fit(X,
quantize=...)``); ``Calibrator.transform(X, quantize=True)`` then gives its
codes.
"""

import numpy as np

from . import _bertflow
from ._base import _BASES, NotFittedError, as_matrix

KINDS = ("int8", "uint8", "binary", "ubinary", "pq")


class Quantizer(*_BASES):
    """Codes fitted on the corpus (see ``docs/calibrators.md``).

    Args:
        kind: ``"int8"`` (one signed byte per dimension), ``"uint8"`` (int8
            plus 128), ``"binary"`` (sign bits packed MSB-first as
            ``numpy.packbits``, stored as int8 ``byte - 128``, as
            sentence-transformers' ``quantize_embeddings``) or ``"ubinary"``
            (the packed bytes as uint8), or ``"pq"`` (product quantization:
            ``m`` uint8 centroid indices per row, 256 centroids per
            sub-vector; score through :meth:`inverse_transform`).
        ranges: int8/uint8: ``"global"`` (one scale ``max |x| / 127`` for
            every dimension: codes compare as integers) or ``"dim"``
            (per-dimension ``[min, max]`` in 256 steps).
        itq: binary/ubinary: rotate first by ITQ (Gong & Lazebnik 2011)
            fitted on the fit set.
        iters: ITQ iterations.
        m: pq: sub-vectors, i.e. bytes per row (must divide the dimension).
        opq: pq: fit a rotation first (OPQ, Ge et al. 2013).
        opq_iters: pq: OPQ rounds (``None``: bertflow's default).

    Fitted attributes: ``quantizer_`` (the compiled quantizer),
    ``n_features_in_``, ``code_bytes_`` (bytes per row of codes),
    ``objective_`` (ITQ's objective per iteration, or OPQ's reconstruction
    error per round; non-increasing).
    """

    def __init__(self, kind="binary", ranges="global", itq=False, iters=50, m=None, opq=True,
                 opq_iters=None):
        self.kind = kind
        self.ranges = ranges
        self.itq = itq
        self.iters = iters
        self.m = m
        self.opq = opq
        self.opq_iters = opq_iters

    @property
    def spec(self):
        """The quantizer spec string, as ``bertflow fit --quantize`` takes it."""
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind == "pq":
            if self.m is None:
                raise ValueError("pq needs m, the number of sub-vectors (bytes per row)")
            spec = f"pq:m={int(self.m)}"
            if not self.opq:
                return spec + ",opq=false"
            return spec if self.opq_iters is None else f"{spec},opq=true,iters={int(self.opq_iters)}"
        if self.kind in ("int8", "uint8"):
            return self.kind if self.ranges == "global" else f"{self.kind}:ranges={self.ranges}"
        if not self.itq:
            return self.kind
        return f"{self.kind}:itq=true,iters={int(self.iters)}"

    def fit(self, X, y=None):
        """Fits the ranges (and the ITQ rotation) on the rows of ``X``;
        returns ``self``."""
        self._set(_bertflow.fit_quantizer(self.spec, as_matrix(X)))
        return self

    def _set(self, q):
        self.quantizer_ = q
        self.n_features_in_ = q.dim
        self.code_bytes_ = q.code_bytes
        self.objective_ = list(q.objective)
        return self

    def _fitted(self):
        q = getattr(self, "quantizer_", None)
        if q is None:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(X) first")
        return q

    def transform(self, X):
        """The codes of the rows of ``X``: int8 (``int8``, ``binary``) or
        uint8 (``uint8``, ``ubinary``, ``pq``), shape (n_samples, code_bytes_)."""
        return self._fitted().quantize(as_matrix(X))

    def fit_transform(self, X, y=None):
        """``fit(X).transform(X)``."""
        return self.fit(X).transform(X)

    def inverse_transform(self, C):
        """Vectors back from codes (float32): the centre of each code's step
        (``s q`` with one global scale), +-1 per dimension for bits (in the
        ITQ-rotated space), the centroids rotated back for pq. Score
        per-dimension ranges and pq codes through it."""
        C = np.asarray(C)
        if C.dtype not in (np.int8, np.uint8):
            raise TypeError(f"codes must be int8 or uint8, not {C.dtype}")
        return self._fitted().dequantize(np.ascontiguousarray(np.atleast_2d(C)).view(np.uint8))

    def describe(self):
        """One line describing the fitted quantizer."""
        return self._fitted().describe()


def _as_codes(a, dtype, name):
    a = np.asarray(a)
    if a.dtype not in (np.int8, np.uint8):
        raise TypeError(f"{name} must hold int8 or uint8 codes, not {a.dtype}")
    if a.ndim not in (1, 2):
        raise ValueError(f"{name} must be 1-D or 2-D, not {a.ndim}-D")
    return np.ascontiguousarray(np.atleast_2d(a).view(dtype))


def _shape(out, a, b):
    if np.ndim(a) == 1 and np.ndim(b) == 1:
        return out[0, 0]
    if np.ndim(a) == 1:
        return out[0]
    if np.ndim(b) == 1:
        return out[:, 0]
    return out


def hamming_similarity(a, b, dim=None):
    """``1 - 2 h / dim`` for every row of ``a`` against every row of ``b``
    (``h`` the Hamming distance of the packed bits: the cosine of the +-1
    vectors), as float64 of shape (len(a), len(b)) (1-D inputs drop their
    axis). ``dim``: the number of coded dimensions (default: 8 bits per
    byte). int8 (``binary``) and uint8 (``ubinary``) codes compare alike.
    """
    A, B = _as_codes(a, np.uint8, "a"), _as_codes(b, np.uint8, "b")
    bits = 8 * A.shape[1] if dim is None else int(dim)
    if not 0 < bits <= 8 * A.shape[1]:
        raise ValueError(f"dim must be in 1..={8 * A.shape[1]}, got {dim}")
    h = _bertflow.hamming_matrix(A, B)
    return _shape(1.0 - 2.0 * h.astype(np.float64) / bits, a, b)


def int8_dot(a, b):
    """int32 dot products of int8 codes, every row of ``a`` against every
    row of ``b`` (shape (len(a), len(b)); 1-D inputs drop their axis). uint8
    codes are refused: subtract 128 first."""
    if np.asarray(a).dtype != np.int8 or np.asarray(b).dtype != np.int8:
        raise TypeError("int8_dot takes int8 codes (uint8 codes: subtract 128 first)")
    A, B = _as_codes(a, np.int8, "a"), _as_codes(b, np.int8, "b")
    return _shape(_bertflow.int8_dot_matrix(A, B), a, b)
