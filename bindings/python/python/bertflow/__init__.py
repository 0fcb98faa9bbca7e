"""bertflow: calibrated sentence embeddings from a frozen BERT-family model.

Encode sentences with :class:`Encoder`, calibrate any embeddings with
:class:`Whitening`, :class:`Flow`, :class:`StandardNorm`, :class:`Natsv`,
:class:`SoftWhitening` or :class:`Auto` (scikit-learn transformers; files
shared with the ``bertflow`` command), ask :func:`advise` whether to calibrate,
accumulate mergeable statistics with :class:`MomentStats`, evaluate any
embedding function on the seven STS benchmarks with :func:`bertflow.sts.evaluate`,
rank texts against a query with a cross-encoder, :class:`Reranker`, and make
sparse (SPLADE, BGE-M3) and per-token vectors with :class:`SparseEncoder`.

Quick start::

    import bertflow
    enc = bertflow.Encoder(pooling="first-last-avg")   # the default model
    corpus = ["A man is playing a guitar.", "A woman is slicing an onion.",
              "Someone plays music.", "A chef cuts vegetables.", "Two dogs run."]
    white = bertflow.Whitening().fit(enc.encode(corpus))
    Z = white.transform(enc.encode(["A man plays a guitar."]))
    print(bertflow.sts.evaluate(enc.encode, calibrate="whiten")["average"])
"""

import os as _os

from . import _bertflow  # noqa: E402

# Default paths (the model, the STS data) are also looked for above the
# installed package, so the defaults work from any directory of a checkout.
_bertflow.add_anchor(_os.path.dirname(_os.path.abspath(__file__)))
from ._bertflow import CalibratorFileError  # noqa: E402
from ._calibrators import (  # noqa: E402
    Auto,
    Calibrator,
    Flow,
    Identity,
    Natsv,
    Pca,
    SnNatsv,
    SoftWhitening,
    StandardNorm,
    Whitening,
    advise,
    calibrator,
    kinds,
    load,
)
from ._encoder import POOLINGS, Encoder, defaults, poolings  # noqa: E402
from ._moments import MomentStats  # noqa: E402
from ._quantize import Quantizer, hamming_similarity, int8_dot  # noqa: E402
from ._bertflow import Reranker, is_reranker  # noqa: E402
from ._bertflow import Index, read_vectors  # noqa: E402
from ._sparse import SparseEncoder, decode_sparse, maxsim  # noqa: E402
from . import sts  # noqa: E402
from . import st  # noqa: E402

__version__ = _bertflow.__version__

__all__ = [
    "Encoder",
    "defaults",
    "POOLINGS",
    "poolings",
    "Calibrator",
    "Whitening",
    "Flow",
    "StandardNorm",
    "Natsv",
    "SnNatsv",
    "Identity",
    "SoftWhitening",
    "Pca",
    "Auto",
    "advise",
    "calibrator",
    "kinds",
    "load",
    "MomentStats",
    "Quantizer",
    "hamming_similarity",
    "int8_dot",
    "Reranker",
    "is_reranker",
    "SparseEncoder",
    "decode_sparse",
    "maxsim",
    "Index",
    "read_vectors",
    "CalibratorFileError",
    "sts",
    "st",
    "__version__",
]
