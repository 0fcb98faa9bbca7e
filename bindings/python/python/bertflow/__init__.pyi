"""Type stubs of the bertflow package."""

import os
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt

from . import sts as sts

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Matrix = npt.ArrayLike
_F32 = npt.NDArray[np.float32]
_Source = Union["Encoder", str, None]
_C = TypeVar("_C", bound="Calibrator")

POOLINGS: Tuple[Tuple[str, str], ...]

def poolings() -> list[Tuple[str, str]]: ...

class CalibratorFileError(ValueError): ...

def defaults() -> dict[str, Any]: ...

class Encoder:
    def __init__(
        self,
        model: Optional[_Path] = None,
        pooling: Optional[str] = None,
        max_len: Optional[int] = None,
        threads: Optional[int] = None,
        cache: Union[bool, _Path] = True,
        precision: Optional[str] = None,
        weighting: Optional[str] = None,
        freq_file: Optional[_Path] = None,
        calibrator: Union[None, _Path, "Calibrator"] = None,
        allow_mismatch: bool = False,
    ) -> None: ...
    def fit_weighting(self, corpus: Iterable[str]) -> "Encoder": ...
    def use_weights_of(self, calibrator: "Calibrator") -> "Encoder": ...
    @property
    def weighting(self) -> str: ...
    @property
    def precision(self) -> str: ...
    def encode(
        self,
        texts: Iterable[str],
        batch_size: Optional[int] = None,
        progress: Union[bool, Callable[[int, int], Any]] = False,
        normalize: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> _F32: ...
    def encode_query(
        self,
        texts: Iterable[str],
        batch_size: Optional[int] = None,
        progress: Union[bool, Callable[[int, int], Any]] = False,
        normalize: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> _F32: ...
    def encode_document(
        self,
        texts: Iterable[str],
        batch_size: Optional[int] = None,
        progress: Union[bool, Callable[[int, int], Any]] = False,
        normalize: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> _F32: ...
    def __call__(
        self,
        texts: Iterable[str],
        batch_size: Optional[int] = None,
        progress: Union[bool, Callable[[int, int], Any]] = False,
        normalize: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> _F32: ...
    @property
    def prompts(self) -> dict[str, str]: ...
    @property
    def default_prompt(self) -> Optional[str]: ...
    @property
    def dimension(self) -> int: ...
    @property
    def pooling(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def identity(self) -> str: ...
    @property
    def max_len(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def cache_dir(self) -> Optional[str]: ...

class Reranker:
    def __init__(
        self,
        model: _Path,
        max_len: Optional[int] = None,
        threads: Optional[int] = None,
        batch_size: int = 32,
        precision: Optional[str] = None,
        cache_dir: Optional[_Path] = None,
    ) -> None: ...
    def rerank(
        self,
        query: str,
        texts: Iterable[str],
        raw_scores: bool = False,
        return_text: bool = False,
        truncate: bool = True,
    ) -> list[dict[str, Any]]: ...
    def predict(
        self, pairs: Iterable[Union[str, Tuple[str, str]]], truncate: bool = True
    ) -> _F32: ...
    @property
    def labels(self) -> list[str]: ...
    @property
    def max_len(self) -> int: ...
    @property
    def model_id(self) -> str: ...
    @property
    def architecture(self) -> str: ...
    @property
    def precision(self) -> str: ...

def is_reranker(model: _Path) -> bool: ...

class SparseEncoder:
    def __init__(
        self,
        model: _Path,
        max_len: Optional[int] = None,
        threads: Optional[int] = None,
        batch_size: int = 32,
        precision: Optional[str] = None,
        cache_dir: Optional[_Path] = None,
    ) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def sparse_kind(self) -> Optional[str]: ...
    def encode(self, texts: Iterable[str], max_active_dims: Optional[int] = None) -> Any: ...
    def encode_multi(
        self,
        texts: Iterable[str],
        skip_first: Optional[bool] = None,
        query_length: Optional[int] = None,
    ) -> list[_F32]: ...
    def encode_all(
        self,
        texts: Iterable[str],
        outputs: str = "dense,sparse,multi",
        max_active_dims: Optional[int] = None,
        skip_first: Optional[bool] = None,
        query_length: Optional[int] = None,
    ) -> dict[str, Any]: ...
    def decode(self, embeddings: Any, top_k: Optional[int] = None) -> list[Any]: ...
    def rerank(
        self, query: str, texts: Iterable[str], query_length: Optional[int] = None
    ) -> list[dict[str, Any]]: ...

def decode_sparse(encoder: SparseEncoder, embeddings: Any, top_k: Optional[int] = None) -> list[Any]: ...
def maxsim(query: _Matrix, doc: _Matrix) -> float: ...

def read_vectors(
    path: _Path, text_column: Optional[str] = "text", vector_column: str = "embedding"
) -> Tuple[Any, Optional[list[str]]]: ...

class Index:
    @staticmethod
    def build(
        path: _Path,
        vectors: Union[_Matrix, _Path, None] = None,
        texts: Optional[Iterable[str]] = None,
        quantize: Optional[str] = None,
        encoder: Optional["Encoder"] = None,
        chunk: int = 8192,
        text_column: str = "text",
        vector_column: str = "embedding",
    ) -> "Index": ...
    @staticmethod
    def open(path: _Path, encoder: Optional["Encoder"] = None, verify: bool = False) -> "Index": ...
    def search(
        self,
        queries: Union[_Matrix, Iterable[str]],
        k: int = 10,
        rescore: int = 50,
        exact: bool = False,
        threads: int = 0,
        return_texts: bool = False,
        shortlist: int = 16,
    ) -> Tuple[Any, ...]: ...
    def add(
        self,
        vectors: Optional[_Matrix] = None,
        texts: Optional[Iterable[str]] = None,
        encoder: Optional["Encoder"] = None,
        chunk: int = 8192,
    ) -> int: ...
    def text(self, i: int) -> str: ...
    def __len__(self) -> int: ...
    @property
    def dimension(self) -> int: ...
    @property
    def quantizer(self) -> Optional[str]: ...
    @property
    def model(self) -> str: ...
    @property
    def path(self) -> str: ...

class Calibrator:
    calibrator_: Any
    n_features_in_: int
    n_features_out_: int
    meta_: dict[str, Any]
    @property
    def spec(self) -> str: ...
    def fit(
        self: _C, X: _Matrix, y: Any = None, *, source: _Source = None,
        quantize: Union[None, str, "Quantizer"] = None,
    ) -> _C: ...
    def transform(self, X: _Matrix, quantize: Union[None, bool, str, "Quantizer"] = None) -> Any: ...
    def fit_transform(self, X: _Matrix, y: Any = None, **fit_params: Any) -> _F32: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes) -> "Calibrator": ...
    def save(self, path: _Path, *, source: _Source = None) -> None: ...
    def describe(self) -> str: ...
    def get_params(self, deep: bool = True) -> dict[str, Any]: ...
    def set_params(self: _C, **params: Any) -> _C: ...

# The constructors below mirror the registry (bertflow.kinds()): the classes
# are generated from it at import, and tests/test_registry.py checks these
# signatures against it.
class Identity(Calibrator):
    def __init__(self) -> None: ...

class StandardNorm(Calibrator):
    def __init__(self) -> None: ...

class Whitening(Calibrator):
    k: Optional[int]
    def __init__(self, k: Optional[int] = None) -> None: ...

class Natsv(Calibrator):
    k: int
    def __init__(self, k: int = 5) -> None: ...

class SnNatsv(Calibrator):
    k: int
    def __init__(self, k: int = 5) -> None: ...

class Flow(Calibrator):
    levels: int
    steps: int
    width: int
    epochs: int
    lr: float
    batch: int
    seed: int
    coupling: str
    permutation: str
    def __init__(
        self,
        levels: int = 3,
        steps: int = 3,
        width: int = 32,
        epochs: int = 1,
        lr: float = 1e-3,
        batch: int = 32,
        seed: int = 42,
        coupling: str = "additive",
        permutation: str = "reverse",
    ) -> None: ...

class Pca(Calibrator):
    k: Optional[int]
    centre: str
    def __init__(self, k: Optional[int] = None, centre: str = "false") -> None: ...

class SoftWhitening(Calibrator):
    alpha: float
    shrink: float
    drop: int
    blend: float
    def __init__(
        self, alpha: float = 0.5, shrink: float = 0.0, drop: int = 0, blend: float = 0.0
    ) -> None: ...

class Auto(Calibrator):
    decision_: dict[str, Any]
    stats_: dict[str, Any]
    def __init__(self) -> None: ...

class Quantizer:
    kind: str
    ranges: str
    itq: bool
    iters: int
    m: Optional[int]
    opq: bool
    opq_iters: Optional[int]
    n_features_in_: int
    code_bytes_: int
    objective_: list[float]
    def __init__(
        self,
        kind: str = "binary",
        ranges: str = "global",
        itq: bool = False,
        iters: int = 50,
        m: Optional[int] = None,
        opq: bool = True,
        opq_iters: Optional[int] = None,
    ) -> None: ...
    @property
    def spec(self) -> str: ...
    def fit(self, X: _Matrix, y: Any = None) -> "Quantizer": ...
    def transform(self, X: _Matrix) -> Any: ...
    def fit_transform(self, X: _Matrix, y: Any = None) -> Any: ...
    def describe(self) -> str: ...

def hamming_similarity(a: Any, b: Any, dim: Optional[int] = None) -> Any: ...
def int8_dot(a: Any, b: Any) -> Any: ...
def advise(X: _Matrix) -> dict[str, Any]: ...
def calibrator(spec: Union[str, Calibrator]) -> Calibrator: ...
def kinds() -> list[dict[str, Any]]: ...
def load(path: _Path) -> Calibrator: ...

class MomentStats:
    def __init__(self, dim: int) -> None: ...
    def update(self, X: _Matrix) -> "MomentStats": ...
    def merge(self, other: "MomentStats") -> "MomentStats": ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: bytes) -> "MomentStats": ...
    def fit(self, spec: Union[str, Calibrator] = "whiten", *, source: _Source = None) -> Calibrator: ...
    @property
    def dim(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def mean(self) -> npt.NDArray[np.float64]: ...
    def covariance(self) -> npt.NDArray[np.float64]: ...
    def comoment(self) -> npt.NDArray[np.float64]: ...
    def copy(self) -> "MomentStats": ...
