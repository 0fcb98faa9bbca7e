"""What the estimator classes share (calibrators, quantizers): the
scikit-learn bases when scikit-learn is importable (else a plain class with
``get_params``/``set_params``), ``NotFittedError`` and :func:`as_matrix`. Below
both ``_calibrators`` and ``_quantize`` so that neither imports the other back.
"""

import inspect
import os

import numpy as np


def _spark_command():
    """Whether this process runs the Spark command (``python -m bertflow.spark``,
    or its ``__main__.py`` under spark-submit), which never needs scikit-learn."""
    import sys

    argv = getattr(sys, "orig_argv", None) or sys.argv  # orig_argv: Python 3.10+
    tail = os.path.join("bertflow", "spark", "__main__.py")
    return any((a == "-m" and i + 1 < len(argv) and argv[i + 1] == "bertflow.spark")
               or a.endswith(tail) for i, a in enumerate(argv))


try:  # pragma: no cover - depends on the environment
    if os.environ.get("BERTFLOW_SKLEARN") == "0" or _spark_command():
        # Spark's Python workers and the Spark command (bertflow.spark):
        # scikit-learn takes seconds to import and neither needs it.
        raise ImportError("BERTFLOW_SKLEARN=0")
    from sklearn.base import BaseEstimator as _BaseEstimator
    from sklearn.base import TransformerMixin as _TransformerMixin
    from sklearn.exceptions import NotFittedError

    _BASES = (_TransformerMixin, _BaseEstimator)
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover

    class NotFittedError(ValueError, AttributeError):
        """The calibrator is used before ``fit``."""

    class _PlainEstimator:
        """get_params/set_params as scikit-learn's BaseEstimator has them."""

        @classmethod
        def _get_param_names(cls):
            sig = inspect.signature(cls.__init__)
            return sorted(
                p.name
                for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            )

        def get_params(self, deep=True):
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params):
            valid = self._get_param_names()
            for k, v in params.items():
                if k not in valid:
                    raise ValueError(
                        f"invalid parameter {k!r} for {type(self).__name__}; valid: {valid}"
                    )
                setattr(self, k, v)
            return self

        def __repr__(self):
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
            return f"{type(self).__name__}({args})"

    _BASES = (_PlainEstimator,)
    HAVE_SKLEARN = False


def as_matrix(X, name="X", allow_empty=False):
    """X as a 2-D float32 array (float64 and non-contiguous input accepted).

    Raises TypeError for non-numeric input and ValueError for a wrong number of
    dimensions or an empty matrix. NaN and inf are caught by the Rust side,
    which names the first offending row and column.
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(f"{name} must be a 2-D array of numbers, not {type(X).__name__}")
    try:
        # Values beyond float32's range become inf, which the Rust side reports.
        with np.errstate(over="ignore"):
            a = np.asarray(X, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a 2-D array of numbers: {e}") from None
    if a.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_samples, n_features), "
            f"got {a.ndim}-D with shape {a.shape}"
            + ("; use X.reshape(1, -1) for a single vector" if a.ndim == 1 else "")
        )
    if a.shape[1] == 0 or (a.shape[0] == 0 and not allow_empty):
        raise ValueError(f"{name} is empty: shape {a.shape}")
    return a
