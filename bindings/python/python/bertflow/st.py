"""Calibrated models for sentence-transformers.

:func:`export` writes a model directory that ``SentenceTransformer(dir)``
loads with no bertflow installed: the transformer's files, a ``Pooling``
module (``last-avg`` is sentence-transformers' mean pooling, ``cls`` its CLS
pooling), the calibrator as a ``Dense`` module with the identity activation
(weight ``W^T``, bias ``-mean W``: every affine calibrator, i.e. ``none``,
``sn``, ``whiten``, ``natsv``, ``sn+natsv``, and ``softwhiten`` or ``auto``
without blend), and ``Normalize`` when asked::

    import bertflow
    w = bertflow.Encoder(pooling="last-avg")
    cal = bertflow.Whitening().fit(w.encode(sentences))
    bertflow.st.export("minilm-whitened", calibrator=cal)
    # anywhere, without bertflow:
    SentenceTransformer("minilm-whitened").encode(texts)   # == cal.transform(w.encode(texts))
"""

import os
import tempfile

from . import _bertflow
from ._encoder import DEFAULT_MODEL

__all__ = ["export"]


def export(
    output,
    model=None,
    pooling="last-avg",
    calibrator=None,
    normalize=False,
    max_len=None,
    allow_mismatch=False,
):
    """Write a calibrated model as a sentence-transformers directory.

    Args:
        output: The directory to create (it must not exist, or be empty). It
            is written beside its final place and renamed, so it appears
            complete or not at all.
        model: The model directory (default ``$BERTFLOW_MODEL``, else
            ``"models/all-MiniLM-L6-v2"``).
        pooling: ``"last-avg"`` (mean pooling) or ``"cls"``.
        calibrator: A calibrator file path, or a fitted bertflow calibrator
            (anything with ``save(path)``), or None for the raw pooled vectors.
            It must be affine; the flow, blends and token weighting are refused
            with a ``ValueError``.
        normalize: Append a ``Normalize`` module (unit-length output).
        max_len: Truncation in tokens, [CLS] and [SEP] included (written as
            ``max_seq_length``; default: the model's position limit, as
            bertflow encodes).
        allow_mismatch: Accept a calibrator fitted on another model or pooling.

    Returns:
        A dict with ``path``, ``modules`` (the module types in order),
        ``dimension`` and ``files``.
    """
    if model is None:
        model = os.environ.get("BERTFLOW_MODEL") or DEFAULT_MODEL
    with tempfile.TemporaryDirectory() as tmp:
        path = calibrator
        if calibrator is not None and hasattr(calibrator, "save"):
            path = os.path.join(tmp, "calibrator.safetensors")
            calibrator.save(path)
        modules, dimension, files = _bertflow.export_st_dir(
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
    }
