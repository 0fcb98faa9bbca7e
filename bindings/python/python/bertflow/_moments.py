"""Streaming, mergeable moment statistics."""

import numpy as np

from . import _bertflow
from ._calibrators import (
    Calibrator,
    _from_fitted,
    _source_args,
    _with_source,
    as_matrix,
    calibrator,
)


def _inner_class():
    cls = getattr(_bertflow, "MomentStats", None)
    if cls is None:  # pragma: no cover - only in a build without moments
        raise NotImplementedError("this build of bertflow has no MomentStats")
    return cls


class MomentStats:
    """Count, mean and co-moment matrix of a stream of embeddings, in float64.

    Feed chunks with :meth:`update`, combine partial statistics (from other
    files, threads or Spark partitions) with :meth:`merge` (exact pairwise
    merge of Chan, Golub and LeVeque: the order of chunks and merges does not
    matter beyond rounding), ship them as bytes (:meth:`to_bytes`,
    :meth:`from_bytes`, or pickle), and fit a moment-based calibrator
    (``whiten``, ``sn``, ``natsv``, ``sn+natsv``) with :meth:`fit`, equal to
    fitting on all rows at once. Memory is O(dim^2) whatever the row count.
    The flow needs its sample and cannot be fitted from moments.

    Args:
        dim: Embedding dimension (number of columns of every chunk).
    """

    def __init__(self, dim):
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, not {type(dim).__name__}")
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self._inner = _inner_class()(dim)

    @classmethod
    def _wrap(cls, inner):
        self = cls.__new__(cls)
        self._inner = inner
        return self

    def update(self, X):
        """Adds the rows of ``X`` (shape ``(n, dim)``); returns ``self``.

        float32 and float64 arrays are read as they are (float64 without a
        cast to float32), anything else is converted to float32; non-contiguous
        arrays are accepted; an empty chunk (0 rows) is a no-op. Raises ValueError for a wrong number of columns
        or NaN/inf values (the statistics are then left unchanged)."""
        if isinstance(X, np.ndarray) and X.dtype == np.float64 and X.ndim == 2:
            self._inner.update_f64(X)
        else:
            self._inner.update(as_matrix(X, allow_empty=True))
        return self

    def merge(self, other):
        """Adds the statistics of ``other`` (same dim); returns ``self``."""
        if not isinstance(other, MomentStats):
            raise TypeError(f"can only merge a MomentStats, not {type(other).__name__}")
        self._inner.merge(other._inner)
        return self

    def to_bytes(self):
        """A compact, versioned binary form (see :meth:`from_bytes`)."""
        return self._inner.to_bytes()

    @classmethod
    def from_bytes(cls, data):
        """The statistics whose :meth:`to_bytes` form is ``data``.

        Raises ValueError for truncated or damaged bytes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        return cls._wrap(_inner_class().from_bytes(bytes(data)))

    def fit(self, spec="whiten", *, source=None):
        """Fits a moment-based calibrator (``"whiten"``, ``"whiten:k=N"``,
        ``"sn"``, ``"natsv:k=N"``, ``"sn+natsv:k=N"``, ``"softwhiten:..."``,
        or an unfitted calibrator of those kinds) from these statistics and returns it,
        fitted. ``source`` is recorded as in :meth:`Calibrator.fit`.

        Raises ValueError for a flow (it needs the sample) or too few rows."""
        c = calibrator(spec) if isinstance(spec, (str, Calibrator)) else None
        if c is None:
            raise TypeError("spec must be a spec string or an unfitted bertflow calibrator")
        _source_args(source)  # type check before the work
        return _from_fitted(_with_source(self._inner.fit(c._spec()), source))

    @property
    def dim(self):
        """Number of columns."""
        return self._inner.dim

    @property
    def count(self):
        """Number of rows added so far."""
        return self._inner.count

    @property
    def mean(self):
        """Column means (float64 array of shape ``(dim,)``)."""
        return self._inner.mean()

    def covariance(self):
        """Sample covariance ``M2 / (count - 1)`` (float64, ``(dim, dim)``;
        ``numpy.cov``'s); needs 2 rows."""
        return self._inner.covariance()

    def comoment(self):
        """The co-moment matrix ``M2 = sum (x - mean)(x - mean)^T`` (float64)."""
        return self._inner.comoment()

    def copy(self):
        """An independent copy."""
        return MomentStats._wrap(self._inner.copy())

    def __reduce__(self):
        return (MomentStats.from_bytes, (self.to_bytes(),))

    def __repr__(self):
        return f"MomentStats(dim={self.dim}, count={self.count})"
