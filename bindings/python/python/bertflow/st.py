"""Calibrated models for sentence-transformers.

:func:`export` writes a model directory that ``SentenceTransformer(dir)``
loads. An affine calibrator (``none``, ``sn``, ``whiten``, ``natsv``,
``sn+natsv``, and ``softwhiten`` or ``auto`` without blend) becomes a
``Dense`` module with the identity activation (weight ``W^T``, bias
``-mean W``), so the directory loads with no bertflow installed::

    import bertflow
    enc = bertflow.Encoder(pooling="last-avg")
    cal = bertflow.Whitening().fit(enc.encode(sentences), source=enc)
    bertflow.st.export("minilm-whitened", calibrator=cal)
    # anywhere, bertflow not needed:
    SentenceTransformer("minilm-whitened").encode(texts)   # == cal.transform(enc.encode(texts))

What is not affine (the flow, blends) and the poolings sentence-transformers'
``Pooling`` cannot express (``first-last-avg``, ``layers:...``, ``cls`` of an
earlier layer) go into :class:`Calibrator`, a module of bertflow's own that
sentence-transformers imports from ``modules.json`` (type
``bertflow.st.Calibrator``) where bertflow is installed. :func:`calibrate`
appends one to any ``SentenceTransformer``; ``model.save(dir)`` and
``SentenceTransformer(dir)`` round-trip it.

Token weighting and the ``pooler`` pooling are not exported.
"""

import json
import os
import tempfile

import numpy as np

from . import _bertflow
from ._encoder import defaults

__all__ = ["export", "calibrate", "Calibrator"]

_CONFIG = "config.json"
_FILE = "calibrator.safetensors"


def export(
    output,
    model=None,
    pooling=None,
    calibrator=None,
    normalize=False,
    max_len=None,
    allow_mismatch=False,
):
    """Write a calibrated model as a sentence-transformers directory.

    ``SentenceTransformer(output).encode(texts)`` then equals
    ``bertflow encode --pooling POOLING --calibrator CALIBRATOR`` (within
    1e-5), normalised when ``normalize`` is set.

    Args:
        output: The directory to create (it must not exist, or be empty). It
            is written beside its final place and renamed, so it appears
            complete or not at all.
        model: The model directory (default: ``bertflow.defaults()["model"]``).
        pooling: Any pooling but ``"pooler"``; ``"last-avg"`` and ``"cls"``
            use sentence-transformers' own ``Pooling`` module. Default: the
            calibrator's pooling, else bertflow's default.
        calibrator: A calibrator file path, or a fitted bertflow calibrator
            (anything with ``to_bytes()``), or None for the raw pooled vectors.
            Token weighting is refused with a ``ValueError``.
        normalize: Append a ``Normalize`` module (unit-length output).
        max_len: Truncation in tokens, [CLS] and [SEP] included (written as
            ``max_seq_length``; default: the model's position limit, as
            bertflow encodes).
        allow_mismatch: Accept a calibrator fitted on another model or pooling.

    Returns:
        A dict with ``path``, ``modules`` (the module types in order),
        ``dimension``, ``files`` and ``needs_bertflow`` (whether loading the
        directory needs bertflow installed).
    """
    if model is None:
        model = defaults()["model"]
    with tempfile.TemporaryDirectory() as tmp:
        path = calibrator
        if calibrator is not None and hasattr(calibrator, "to_bytes"):
            path = os.path.join(tmp, _FILE)
            with open(path, "wb") as f:
                f.write(calibrator.to_bytes())
        modules, dimension, files, needs = _bertflow.export_st_dir(
            os.fspath(model),
            pooling,
            os.fspath(output),
            None if path is None else os.fspath(path),
            bool(normalize),
            max_len,
            bool(allow_mismatch),
        )
    return {
        "path": os.fspath(output),
        "modules": list(modules),
        "dimension": dimension,
        "files": files,
        "needs_bertflow": needs,
    }


#: sentence-transformers' ``Pooling`` modes and the bertflow pooling each one is.
_ST_POOLINGS = {"pooling_mode_mean_tokens": "last-avg", "pooling_mode_cls_token": "cls"}


def _pooling_of(module):
    """The bertflow pooling a sentence-transformers ``Pooling`` module computes,
    or None when it is not one bertflow names (max, several modes, ...)."""
    on = [k for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                      "pooling_mode_mean_tokens", "pooling_mode_mean_sqrt_len_tokens",
                      "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
          if getattr(module, k, False)]
    return _ST_POOLINGS.get(on[0]) if len(on) == 1 else None


def insertion_point(modules, meta):
    """Where a calibrator with file metadata ``meta`` (its ``meta_``) goes in
    the sentence-transformers pipeline ``modules`` (the model's modules in
    order), so that it sees exactly the vectors it was fitted on:

    - fitted with ``pooling="st"`` (on the model's whole output): at the end;
    - fitted on ``last-avg`` or ``cls``: right after the ``Pooling`` module
      computing that pooling, before ``Normalize``; refused when another module
      (a ``Dense``) changes the vectors after it, or the pooling differs.

    Returns the index to insert at; raises ValueError with the reason."""
    names = [type(m).__name__ for m in modules]
    pooling = meta.get("pooling")
    if pooling == "st":
        return len(modules)
    pools = [i for i, n in enumerate(names) if n == "Pooling"]
    if len(pools) != 1:
        raise ValueError(
            f"the calibrator was fitted with pooling {pooling!r}, and this model's modules "
            f"({', '.join(names)}) have no single Pooling module to put it after; fit it with "
            "pooling='st' (the model's own output) instead")
    i = pools[0]
    mine = _pooling_of(modules[i])
    if mine != pooling:
        raise ValueError(
            f"the calibrator was fitted with pooling {pooling!r}, and this model pools "
            f"{mine or 'with another mode'}: fit it on this model's pooling (or with "
            "pooling='st')")
    after = [n for n in names[i + 1:] if n != "Normalize"]
    if after:
        raise ValueError(
            f"the calibrator was fitted on {pooling} vectors, and this model changes them "
            f"after pooling ({', '.join(after)}): fit it with pooling='st' instead")
    return i + 1


def _model_name(model):
    try:
        name = model[0].auto_model.config._name_or_path
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return os.path.basename(os.path.normpath(name)) if name else None


def calibrate(model, calibrator, allow_mismatch=False):
    """Insert a :class:`Calibrator` applying ``calibrator`` (a fitted bertflow
    calibrator or a calibrator file) into the ``SentenceTransformer`` ``model``
    where it sees the vectors it was fitted on (see :func:`insertion_point`:
    after the ``Pooling`` module and before ``Normalize`` for a ``last-avg`` or
    ``cls`` calibrator; at the end for one fitted with ``pooling="st"``), and
    return ``model``.

    Raises:
        ValueError: the calibrator was fitted on another pooling, on vectors
            this pipeline changes after pooling, on another dimension, or on
            another model (by directory name; ``allow_mismatch=True`` accepts
            that one).
    """
    from ._calibrators import load

    cal = load(calibrator) if not hasattr(calibrator, "to_bytes") else calibrator
    meta = dict(getattr(cal, "meta_", None) or {})
    modules = list(model._modules.values())
    at = insertion_point(modules, meta)
    recorded = str(meta.get("model", "")).rsplit("@", 1)[0]
    mine = _model_name(model)
    if recorded and mine and recorded != mine and not meta.get("external") and not allow_mismatch:
        raise ValueError(
            f"the calibrator was fitted on model {recorded!r}, this is {mine!r} "
            "(allow_mismatch=True to use it anyway)")
    module = _calibrator_class()(cal)
    rest = modules[at:]
    for k in list(model._modules.keys())[at:]:
        del model._modules[k]
    model.append(module)
    for m in rest:
        model.append(m)
    return model


def _write_atomically(path, data):
    """``data`` to ``path`` through core's atomic writer (temporary file,
    fsync, rename): an error leaves a file already there as it was."""
    _bertflow.write_atomic(os.fspath(path), bytes(data))


def _make_calibrator_class():
    import torch

    from ._calibrators import from_bytes

    class Calibrator(torch.nn.Module):
        """A sentence-transformers module that applies a bertflow calibrator.

        It reads ``features["sentence_embedding"]`` (what the modules before
        it pooled), or, with a ``source``, pools the hidden states itself
        (``{"mean": [1, 6]}``: the masked token mean of the mean of those
        hidden states, 0 being the embedding output; ``{"cls": n}``: the
        first token of hidden state n; the transformer must output its hidden
        states), applies the calibrator (bertflow's own code, on the CPU) and
        writes the result to ``features["sentence_embedding"]``.

        Args:
            calibrator: A fitted bertflow calibrator, a calibrator file path,
                or None (pooling only).
            source: None, or where to pool from (see above).
        """

        def __init__(self, calibrator=None, source=None):
            super().__init__()
            if calibrator is None:
                data = None
            elif hasattr(calibrator, "to_bytes"):
                data = calibrator.to_bytes()
            else:
                with open(os.fspath(calibrator), "rb") as f:
                    data = f.read()
            self._bytes = data
            self.calibrator = None if data is None else from_bytes(data)
            self.source = source

        def _pool(self, features):
            if self.source is None:
                return features["sentence_embedding"]
            states = features.get("all_layer_embeddings")
            if states is None:
                raise ValueError(
                    "bertflow.st.Calibrator pools from the hidden states: load the "
                    "transformer with output_hidden_states=True"
                )
            if "cls" in self.source:
                return states[self.source["cls"]][:, 0]
            h = torch.stack([states[i] for i in self.source["mean"]]).mean(0)
            mask = features["attention_mask"].unsqueeze(-1).to(h.dtype)
            return (h * mask).sum(1) / mask.sum(1).clamp(min=1)

        def forward(self, features):
            emb = self._pool(features)
            if self.calibrator is not None:
                x = emb.detach().to("cpu", torch.float32).numpy()
                z = np.ascontiguousarray(self.calibrator.transform(x), dtype=np.float32)
                emb = torch.from_numpy(z).to(emb.device)
            features["sentence_embedding"] = emb
            return features

        def get_sentence_embedding_dimension(self):
            if self.calibrator is None:
                return None
            return self.calibrator.n_features_out_

        def save(self, output_path, *args, **kwargs):
            os.makedirs(output_path, exist_ok=True)
            if self._bytes is not None:
                _write_atomically(os.path.join(output_path, _FILE), self._bytes)
            config = {"source": self.source, "calibrator": None if self._bytes is None else _FILE}
            _write_atomically(os.path.join(output_path, _CONFIG), json.dumps(config, indent=2).encode())

        @staticmethod
        def load(input_path):
            with open(os.path.join(input_path, _CONFIG), encoding="utf-8") as f:
                config = json.load(f)
            file = config.get("calibrator")
            path = None if file is None else os.path.join(input_path, file)
            return Calibrator(path, source=config.get("source"))

    Calibrator.__module__ = __name__
    return Calibrator


def _calibrator_class():
    cls = globals().get("Calibrator")
    if cls is None:
        cls = globals()["Calibrator"] = _make_calibrator_class()
    return cls


def __getattr__(name):
    # torch is imported only when the module class is asked for (by
    # sentence-transformers loading a directory, or by calibrate()).
    if name == "Calibrator":
        return _calibrator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
