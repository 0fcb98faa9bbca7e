"""Calibrators in the scikit-learn shape.

Each class holds its hyper-parameters as constructor arguments (so
``get_params``, ``set_params`` and ``sklearn.clone`` work) and, once fitted,
the compiled calibrator in ``calibrator_``. When scikit-learn is importable
they subclass ``TransformerMixin`` and ``BaseEstimator`` and work inside a
``Pipeline``; without it they are plain classes with the same methods.
Files are the ``bertflow`` command's calibrator files.
"""

import inspect
import json
import os

import numpy as np

from . import _bertflow

try:  # pragma: no cover - depends on the environment
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


def _with_source(fitted, source):
    """``fitted`` recording ``source`` (see :meth:`Calibrator.fit`): an
    Encoder's identity, pooling and token weighting, or a label."""
    args = _source_args(source)
    if args is None:
        return fitted
    fitted = fitted.with_source(**args)
    inner = getattr(source, "_inner", None)
    if inner is not None and getattr(source, "weighting", "mean") != "mean":
        fitted = fitted.with_weighting_of(inner)
    return fitted


def _source_args(source):
    """with_source() arguments for an Encoder, a label, or None."""
    if source is None:
        return None
    if isinstance(source, str):
        return {"label": source}
    identity = getattr(source, "identity", None)
    pooling = getattr(source, "pooling", None)
    if isinstance(identity, str) and isinstance(pooling, str):
        return {"model": identity, "pooling": pooling}
    raise TypeError(
        "source must be a bertflow.Encoder, a str label, or None, "
        f"not {type(source).__name__}"
    )


class Calibrator(*_BASES):
    """Base class of the calibrators; use a subclass or :func:`calibrator`.

    Fitted attributes: ``calibrator_`` (the compiled calibrator),
    ``n_features_in_``, ``n_features_out_``, ``meta_`` (the file metadata).
    """

    _kind = None

    def _spec(self):
        raise NotImplementedError

    @property
    def spec(self):
        """The spec string of the hyper-parameters (``"whiten:k=256"``, ...)."""
        return _bertflow.spec_info(self._spec())[0]

    def fit(self, X, y=None, *, source=None):
        """Fits on the rows of ``X`` (one embedding each); returns ``self``.

        Args:
            X: array of shape (n_samples, n_features); float64 and
                non-contiguous arrays are accepted (computed in float32 in,
                float64 statistics).
            y: ignored (scikit-learn convention).
            source: where ``X`` came from, recorded in the saved file: a
                :class:`bertflow.Encoder` (its model identity and pooling, as
                ``bertflow fit`` writes them, so that ``bertflow encode
                --calibrator`` accepts the file), a str label for external
                embeddings, or None (external embeddings, no label). An
                Encoder's token weighting is recorded too, weights included.

        Raises:
            ValueError: a 1-D or 3-D array, too few rows, NaN or inf values,
                invalid hyper-parameters. RuntimeError: a flow fit diverged.
        """
        _source_args(source)  # type check before the work
        X = as_matrix(X)
        fitted = _with_source(_bertflow.fit(self._spec(), X, None), source)
        self._set_fitted(fitted)
        return self

    def _set_fitted(self, fitted):
        self.calibrator_ = fitted
        self.n_features_in_ = fitted.input_dim
        self.n_features_out_ = fitted.output_dim
        self.meta_ = json.loads(fitted.meta_json)

    def _fitted(self):
        f = getattr(self, "calibrator_", None)
        if f is None:
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet: call fit(X) first "
                "(or load a file with bertflow.load)"
            )
        return f

    def transform(self, X):
        """Calibrated rows of ``X``: float32, shape (n_samples, n_features_out_).

        Raises:
            ValueError: wrong number of columns, NaN or inf values, a 1-D or
                3-D array. NotFittedError: before ``fit``.
        """
        f = self._fitted()
        return f.transform(as_matrix(X))

    def fit_transform(self, X, y=None, **fit_params):
        """``fit(X, **fit_params).transform(X)``."""
        return self.fit(X, y, **fit_params).transform(X)

    def to_bytes(self):
        """The calibrator file's content (what :meth:`save` writes)."""
        return self._fitted().to_bytes()

    def save(self, path, *, source=None):
        """Writes the calibrator file (a ``.safetensors`` that ``bertflow encode
        --calibrator`` and :func:`bertflow.load` read).

        ``source`` overrides the recorded source of the embeddings (see
        :meth:`fit`).
        """
        _with_source(self._fitted(), source).save(os.fspath(path))

    def describe(self):
        """One line describing the fitted calibrator."""
        return self._fitted().describe()


class Identity(Calibrator):
    """The identity (spec ``none``): the uncalibrated baseline."""

    _kind = "none"

    def __init__(self):
        pass

    def _spec(self):
        return "none"


class StandardNorm(Calibrator):
    """Per-dimension standardisation (spec ``sn``): subtract the mean, divide
    by the standard deviation; a zero-variance dimension maps to 0."""

    _kind = "sn"

    def __init__(self):
        pass

    def _spec(self):
        return "sn"


def _opt_int(name, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return int(v)


class Whitening(Calibrator):
    """BERT-whitening (Su et al. 2021; spec ``whiten[:k=N]``).

    Mean, covariance (n-1), eigendecomposition, ``W = U diag(1/sqrt(s))``;
    ``x -> (x - mean) W``, keeping the ``k`` leading directions. Null directions
    of a rank-deficient covariance are dropped.

    Args:
        k: Number of leading directions to keep; None keeps every direction of
            non-zero variance.
    """

    _kind = "whiten"

    def __init__(self, k=None):
        self.k = k

    def _spec(self):
        k = _opt_int("k", self.k)
        return "whiten" if k is None else f"whiten:k={k}"


class Natsv(Calibrator):
    """All-but-the-top (Mu & Viswanath 2018; spec ``natsv:k=N``): subtract the
    mean, then remove the top-``k`` principal directions.

    Args:
        k: Number of principal directions to remove (>= 1).
    """

    _kind = "natsv"

    def __init__(self, k=5):
        self.k = k

    def _spec(self):
        return f"natsv:k={_opt_int('k', self.k)}"


class SnNatsv(Calibrator):
    """Standardisation, then all-but-the-top (spec ``sn+natsv:k=N``).

    Args:
        k: Number of principal directions to remove after standardising.
    """

    _kind = "sn+natsv"

    def __init__(self, k=5):
        self.k = k

    def _spec(self):
        return f"sn+natsv:k={_opt_int('k', self.k)}"


class Flow(Calibrator):
    """BERT-flow (Li et al. 2020; spec ``flow[:...]``): a Glow normalizing flow
    that maps the embeddings to a standard Gaussian, trained by maximum
    likelihood with Adam. The output is the Gaussian latent.

    The embedding is a 1x1 image with d channels: ``levels`` levels of
    ``steps`` steps of actnorm, a channel permutation and a coupling layer;
    half the channels split off after every level but the last. Unlike the
    moment-based calibrators it needs its fit sample in memory.

    Args:
        levels: Levels L (1..16).
        steps: Steps K per level (1..64).
        width: Hidden width of the coupling networks.
        epochs: Passes over the fit data.
        lr: Adam learning rate.
        batch: Mini-batch size (>= 2; the first batch initialises the actnorms).
        seed: Seed of the weight initialisation and the shuffling.
        coupling: ``"additive"`` (BERT-flow's) or ``"affine"`` (Glow's).
        permutation: ``"reverse"`` (BERT-flow's) or ``"lu"`` (Glow's 1x1
            convolution; slower).
    """

    _kind = "flow"

    def __init__(
        self,
        levels=3,
        steps=3,
        width=32,
        epochs=1,
        lr=1e-3,
        batch=32,
        seed=42,
        coupling="additive",
        permutation="reverse",
    ):
        self.levels = levels
        self.steps = steps
        self.width = width
        self.epochs = epochs
        self.lr = lr
        self.batch = batch
        self.seed = seed
        self.coupling = coupling
        self.permutation = permutation

    def _spec(self):
        ints = {k: getattr(self, k) for k in ("levels", "steps", "width", "epochs", "batch", "seed")}
        for k, v in ints.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{k} must be an int, not {type(v).__name__}")
            if v < 0:
                raise ValueError(f"{k} must be >= 0, got {v}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float, np.floating)):
            raise TypeError(f"lr must be a number, not {type(self.lr).__name__}")
        for k in ("coupling", "permutation"):
            if not isinstance(getattr(self, k), str):
                raise TypeError(f"{k} must be a str")
        opts = ",".join(f"{k}={int(v)}" for k, v in ints.items())
        return (
            f"flow:{opts},lr={float(self.lr)!r},coupling={self.coupling},"
            f"permutation={self.permutation}"
        )


def _number(name, v, lo, hi, hi_open=False):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    v = float(v)
    if not (lo <= v <= hi) or (hi_open and v == hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}{')' if hi_open else ']'}, got {v}")
    return v


class SoftWhitening(Calibrator):
    """Soft whitening with covariance shrinkage (spec ``softwhiten:...``):
    ``x -> (x - mean) U diag(s'^(-alpha/2))`` with the covariance eigenvalues
    ``s`` shrunk towards their mean, ``s' = (1 - shrink) s + shrink mean(s)``.
    ``alpha=0`` centres, ``alpha=1, shrink=0`` is BERT-whitening.

    Args:
        alpha: Whitening strength in [0, 1].
        shrink: Shrinkage of the eigenvalues towards their mean, in [0, 1].
        drop: Leading principal directions removed first (as all-but-the-top).
        blend: Weight in [0, 1) of the raw direction mixed back in:
            ``y = blend x/|x| + (1 - blend) z/|z|`` with ``z`` the whitened
            vector in input coordinates, so cosines mix raw and whitened
            cosines; a blended output keeps the input dimension.
    """

    _kind = "softwhiten"

    def __init__(self, alpha=0.5, shrink=0.0, drop=0, blend=0.0):
        self.alpha = alpha
        self.shrink = shrink
        self.drop = drop
        self.blend = blend

    def _spec(self):
        alpha = _number("alpha", self.alpha, 0.0, 1.0)
        shrink = _number("shrink", self.shrink, 0.0, 1.0)
        blend = _number("blend", self.blend, 0.0, 1.0, hi_open=True)
        drop = self.drop
        if isinstance(drop, bool) or not isinstance(drop, (int, np.integer)):
            raise TypeError(f"drop must be an int, not {type(drop).__name__}")
        if drop < 0:
            raise ValueError(f"drop must be >= 0, got {drop}")
        return f"softwhiten:alpha={alpha!r},shrink={shrink!r},drop={int(drop)},blend={blend!r}"


class Auto(Calibrator):
    """Decides from the fit embeddings alone (no labels) how far to calibrate
    (spec ``auto``): the identity for embeddings that are already isotropic
    (a model trained for cosine similarity), soft whitening without the
    leading directions for frequency-driven anisotropy (static or raw
    embeddings), soft whitening blended with the raw direction for a narrow
    offset cone (CLS vectors). See :func:`advise` for the same decision
    without fitting.

    Fitted attributes (besides the base class's): ``decision_`` (dict: action
    ``identity`` or ``soft-whiten``, alpha, shrink, drop, blend, reason) and ``stats_`` (dict of the statistics
    it was taken from).
    """

    _kind = "auto"

    def __init__(self):
        pass

    def _spec(self):
        return "auto"

    def _set_fitted(self, fitted):
        super()._set_fitted(fitted)
        header = json.loads(fitted.header_json)
        self.decision_ = header["decision"]
        self.stats_ = header["stats"]


def advise(X):
    """"Should I calibrate?" for embeddings ``X`` (one row per sentence; at
    least 2 rows, finite values; labels are never needed).

    Returns a dict (the same as ``bertflow analyze --json``'s ``advice``):
    ``stats`` (mean pair cosine, the share of the mean vector in the top-10
    principal directions, spectrum shares, ...), ``decision`` (what
    :class:`Auto` would apply, and why), ``expected`` (``"none"`` or
    ``"improves"``) and ``message`` (a sentence to act on).

    Raises:
        ValueError: fewer than 2 rows, NaN or inf values, a constant matrix,
            a 1-D or 3-D array.
    """
    return json.loads(_bertflow.advise(as_matrix(X)))


_CLASSES = {
    c._kind: c
    for c in (Identity, StandardNorm, Whitening, Natsv, SnNatsv, Flow, SoftWhitening, Auto)
}


def calibrator(spec):
    """An unfitted calibrator from a spec string, as the CLI's ``--kind``
    takes it: ``"none"``, ``"sn"``, ``"whiten"``, ``"whiten:k=256"``,
    ``"natsv:k=5"``, ``"sn+natsv:k=5"``, ``"flow"``,
    ``"flow:levels=2,steps=3,epochs=2,seed=7"``, ``"softwhiten:alpha=0.7"``,
    ``"auto"``, ...

    Raises ValueError for an unknown kind or option, naming the valid ones.
    """
    if isinstance(spec, Calibrator):
        from copy import deepcopy

        return _CLASSES[spec._kind](**deepcopy(spec.get_params()))
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, not {type(spec).__name__}")
    _, kind, params = _bertflow.spec_info(spec)
    params = json.loads(params)
    params.pop("kind", None)
    return _CLASSES[kind](**params)


def _from_fitted(fitted):
    c = calibrator(fitted.spec)
    c._set_fitted(fitted)
    return c


def load(path):
    """Reads a calibrator file (from ``bertflow fit`` or :meth:`Calibrator.save`)
    and returns the fitted calibrator of the right class.

    Raises:
        FileNotFoundError: no such file.
        bertflow.CalibratorFileError: a damaged, truncated or foreign file
            (a ValueError).
    """
    return _from_fitted(_bertflow.load(os.fspath(path)))


def from_bytes(data):
    """The fitted calibrator whose file content is ``data`` (see
    :meth:`Calibrator.to_bytes`)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    return _from_fitted(_bertflow.fitted_from_bytes(bytes(data)))


Calibrator.from_bytes = staticmethod(from_bytes)
