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
import warnings as _warnings
import os

import numpy as np

from . import _bertflow
from ._base import _BASES, HAVE_SKLEARN, NotFittedError, as_matrix  # noqa: F401 (re-exported)
from ._quantize import Quantizer


def _with_source(fitted, source):
    """``fitted`` recording ``source`` (see :meth:`Calibrator.fit`): an
    Encoder's identity, pooling, token weighting and default prompt, or a
    label."""
    args = _source_args(source)
    if args is None:
        return fitted
    fitted = fitted.with_source(**args)
    inner = getattr(source, "_inner", None)
    if inner is not None and getattr(source, "weighting", "mean") != "mean":
        fitted = fitted.with_weighting_of(inner)
    if inner is not None:
        fitted = fitted.with_prompt(inner.default_prompt)
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


def kinds():
    """The registry of calibrator kinds (what ``bertflow kinds --json`` prints):
    a list of dicts, one per kind, with ``name``, ``doc``, ``moments`` (fitted
    from moment statistics alone), ``synopsis`` and ``params``: per parameter
    its ``name``, ``type`` (``"int"``, ``"float"``, ``"choice"``), ``default``
    (None when absent or required), ``required``, ``range`` (in words), ``doc``
    and ``min``/``max`` (numbers), ``values`` (choices), ``absent`` (what no
    value means), ``example`` (of a required value).

    The calibrator classes take their parameters and defaults from it.
    """
    return json.loads(_bertflow.kinds())


_KINDS = {k["name"]: k for k in kinds()}


def _init_default(p):
    """A constructor default: the registry's default, or for a required
    value its example (scikit-learn estimators construct with no arguments)."""
    return p["example"] if p["required"] else p["default"]


def _format_value(p, v):
    """A parameter value as the spec string writes it. Types are checked here
    (TypeError); values and ranges by the Rust parser (ValueError)."""
    name, t = p["name"], p["type"]
    if t == "int":
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        return str(int(v))
    if t == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, not {type(v).__name__}")
        return repr(float(v))
    if not isinstance(v, str):
        raise TypeError(f"{name} must be a str, not {type(v).__name__}")
    return v


def _params_doc(info):
    lines = [f"Parameters (from the registry, ``bertflow.kinds()``; spec ``{info['synopsis']}``):", ""]
    if not info["params"]:
        lines.append("    none")
    for p in info["params"]:
        if p["required"]:
            default = f"required in a spec; default here {p['example']!r}"
        elif p["default"] is None:
            default = f"default None: {p.get('absent', 'absent')}"
        else:
            default = f"default {p['default']!r}"
        lines.append(f"    {p['name']} ({p['type']}): {p['doc']} ({default}; {p['range']}).")
    return "\n".join(lines)


class Calibrator(*_BASES):
    """Base class of the calibrators; use a subclass or :func:`calibrator`.

    Each subclass names a kind of the registry (``_kind``); its constructor's
    parameters, their order and defaults are the registry's (generated when
    the class is defined, with an explicit signature for scikit-learn's
    ``get_params``/``set_params``/``clone``).

    Fitted attributes: ``calibrator_`` (the compiled calibrator),
    ``n_features_in_``, ``n_features_out_``, ``meta_`` (the file metadata).
    """

    _kind = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("_kind")
        if kind is None:
            return
        info = _KINDS[kind]
        names = tuple(p["name"] for p in info["params"])
        P = inspect.Parameter
        sig = inspect.Signature(
            [P("self", P.POSITIONAL_OR_KEYWORD)]
            + [P(p["name"], P.POSITIONAL_OR_KEYWORD, default=_init_default(p)) for p in info["params"]]
        )

        def __init__(self, *args, **kwargs):
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            for name in names:
                setattr(self, name, bound.arguments[name])

        __init__.__signature__ = sig
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        __init__.__module__ = cls.__module__
        __init__.__doc__ = _params_doc(info)
        cls.__init__ = __init__
        cls.__doc__ = (cls.__doc__ or info["doc"]).rstrip() + "\n\n    " + _params_doc(info).replace("\n", "\n    ")

    def _spec(self):
        """The spec string of the hyper-parameters (every value given, types
        checked; the Rust parser checks the values)."""
        opts = [
            f"{p['name']}={_format_value(p, getattr(self, p['name']))}"
            for p in _KINDS[self._kind]["params"]
            if getattr(self, p["name"]) is not None
        ]
        return self._kind + (":" + ",".join(opts) if opts else "")

    @property
    def spec(self):
        """The spec string of the hyper-parameters (``"whiten:k=256"``, ...)."""
        return _bertflow.spec_info(self._spec())[0]

    def fit(self, X, y=None, *, source=None, quantize=None):
        """Fits on the rows of ``X`` (one embedding each); returns ``self``.
        With ``quantize`` (a spec such as ``"binary:itq=true"`` or an
        unfitted :class:`bertflow.Quantizer`), a quantizer is then fitted on
        the calibrated rows and the calibrator (and its file) ends in it. A
        spec string takes ``bertflow fit --quantize``'s defaults: ``"binary"``
        after ``pca`` fits an ITQ rotation unless it says ``itq=false``.

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
                Encoder's token weighting is recorded too, weights included,
                and its default prompt (vectors made with another prompt, as
                ``encode_query`` may, are refused like another pooling).

        Raises:
            ValueError: a 1-D or 3-D array, too few rows, NaN or inf values,
                invalid hyper-parameters. RuntimeError: a flow fit diverged.
        """
        _source_args(source)  # type check before the work
        X = as_matrix(X)
        fitted = _with_source(_bertflow.fit(self._spec(), X, None), source)
        if isinstance(quantize, str):
            # As `bertflow fit --quantize`: defaults by the calibrator (ITQ
            # for bits after a rotation unless the spec says itq=false).
            stage = _bertflow.fit_quantizer(quantize, fitted.transform(X), self._kind)
            fitted = fitted.with_quantizer(stage)
        elif quantize is not None:
            stage = _bertflow.fit_quantizer(quantize.spec, fitted.transform(X))
            fitted = fitted.with_quantizer(stage)
        self._set_fitted(fitted)
        # Too few rows, a flow whose NLL got worse: core's warnings, also
        # recorded in the file (meta_["warnings"]).
        for w in self.meta_.get("warnings", []):
            _warnings.warn(w, UserWarning, stacklevel=2)
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

    def transform(self, X, quantize=None):
        """Calibrated rows of ``X``: float32, shape (n_samples, n_features_out_).

        ``quantize``: ``True`` gives the codes of the quantizer stage the
        calibrator ends in; a fitted :class:`bertflow.Quantizer` its codes of
        the calibrated rows; a quantizer spec (``"int8"``, ...) the codes of
        one fitted on these calibrated rows themselves.

        Raises:
            ValueError: wrong number of columns, NaN or inf values, a 1-D or
                3-D array, ``quantize=True`` without a stage. NotFittedError:
                before ``fit``.
        """
        f = self._fitted()
        Y = f.transform(as_matrix(X))
        if quantize is None or quantize is False:
            return Y
        if quantize is True:
            stage = f.quantizer
            if stage is None:
                raise ValueError("quantize=True: this calibrator ends in no quantizer stage")
            return stage.quantize(Y)
        if isinstance(quantize, str):
            return _bertflow.fit_quantizer(quantize, Y).quantize(Y)
        return quantize.transform(Y)

    @property
    def quantizer_(self):
        """The quantizer stage the calibrator ends in (a fitted
        :class:`bertflow.Quantizer`), or None."""
        stage = self._fitted().quantizer
        if stage is None:
            return None
        kind, _, opts = stage.spec.partition(":")
        kw = dict(o.split("=") for o in opts.split(",") if o)
        q = Quantizer(kind=kind, ranges=kw.get("ranges", "global"), itq=kw.get("itq") == "true",
                      iters=int(kw.get("iters", 50)))
        return q._set(stage)

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


class StandardNorm(Calibrator):
    """Per-dimension standardisation (spec ``sn``): subtract the mean, divide
    by the standard deviation; a zero-variance dimension maps to 0."""

    _kind = "sn"


class Whitening(Calibrator):
    """BERT-whitening (Su et al. 2021; spec ``whiten[:k=N]``).

    Mean, covariance (n-1), eigendecomposition, ``W = U diag(1/sqrt(s))``;
    ``x -> (x - mean) W``, keeping the ``k`` leading directions (None: every
    direction of non-zero variance). Null directions of a rank-deficient
    covariance are dropped."""

    _kind = "whiten"


class Natsv(Calibrator):
    """All-but-the-top (Mu & Viswanath 2018; spec ``natsv:k=N``): subtract the
    mean, then remove the top-``k`` principal directions."""

    _kind = "natsv"


class SnNatsv(Calibrator):
    """Standardisation, then all-but-the-top (spec ``sn+natsv:k=N``)."""

    _kind = "sn+natsv"


class Flow(Calibrator):
    """BERT-flow (Li et al. 2020; spec ``flow[:...]``): a Glow normalizing flow
    that maps the embeddings to a standard Gaussian, trained by maximum
    likelihood with Adam. The output is the Gaussian latent.

    The embedding is a 1x1 image with d channels: ``levels`` levels of
    ``steps`` steps of actnorm, a channel permutation and a coupling layer;
    half the channels split off after every level but the last. Unlike the
    moment-based calibrators it needs its fit sample in memory."""

    _kind = "flow"


class SoftWhitening(Calibrator):
    """Soft whitening with covariance shrinkage (spec ``softwhiten:...``):
    ``x -> (x - mean) U diag(s'^(-alpha/2))`` with the covariance eigenvalues
    ``s`` shrunk towards their mean, ``s' = (1 - shrink) s + shrink mean(s)``.
    ``alpha=0`` centres, ``alpha=1, shrink=0`` is BERT-whitening. ``drop``
    removes leading principal directions first; ``blend`` mixes the raw
    direction back in, ``y = blend x/|x| + (1 - blend) z/|z|`` with ``z`` the
    whitened vector in input coordinates, so cosines mix raw and whitened
    cosines (a blended output keeps the input dimension)."""

    _kind = "softwhiten"


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
    it was taken from)."""

    _kind = "auto"

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


def _class_name(kind):
    return "".join(part.capitalize() for part in kind.replace("+", "_").split("_"))


# A kind registered in Rust without a hand-named class above gets one here
# (a module attribute, so it pickles): a new kind needs no Python code.
for _name in _KINDS:
    if _name not in _CLASSES:
        _cls = type(_class_name(_name), (Calibrator,), {"_kind": _name, "__module__": __name__})
        globals()[_cls.__name__] = _cls
        _CLASSES[_name] = _cls


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
