"""Type stubs of bertflow.sts."""

import os
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy.typing as npt

from . import Calibrator

TASKS: Tuple[str, ...]
AGGREGATES: Tuple[str, ...]

class StsTask:
    @property
    def name(self) -> str: ...
    @property
    def num_pairs(self) -> int: ...
    def sentences(self) -> list[str]: ...
    def fit_sentences(self) -> list[str]: ...
    def evaluate(self, embeddings: npt.ArrayLike, aggregate: str) -> Any: ...

def tasks(
    data: Union[str, "os.PathLike[str]", None] = None,
    tasks: Union[str, Sequence[str], None] = None,
) -> list[StsTask]: ...

def evaluate(
    embed: Callable[[list[str]], npt.ArrayLike],
    data: Union[str, "os.PathLike[str]", None] = None,
    tasks: Union[str, Sequence[str], None] = None,
    aggregate: str = "all",
    calibrate: Union[str, Calibrator, Callable[[], Any], None] = None,
) -> dict[str, Any]: ...
