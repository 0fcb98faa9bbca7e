"""The seven STS benchmarks for any embedding function.

:func:`evaluate` takes a callable from a list of str to an array (one row per
sentence): a :class:`bertflow.Encoder`, a sentence-transformers model's
``encode``, a client of an embedding API... The data loading, the sentence
lists and the scoring are bertflow's (the same code as ``bertflow eval``), so
for bertflow's own encoder the numbers are the command's.
"""

import numpy as np

from . import _bertflow
from ._calibrators import Calibrator, as_matrix, calibrator as _make_calibrator

#: The task names, in the order results are reported.
TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R")

#: How STS12-16's subsets are combined.
AGGREGATES = ("all", "wmean", "mean")


def _embed(embed, sentences, what):
    x = as_matrix(embed(sentences), f"the embeddings of {what}")
    if x.shape[0] != len(sentences):
        raise ValueError(
            f"the embedding function returned {x.shape[0]} rows for {len(sentences)} "
            f"sentences ({what})"
        )
    return x


def _new_calibrator(calibrate):
    if isinstance(calibrate, (str, Calibrator)):
        return _make_calibrator(calibrate)
    if callable(calibrate):
        return calibrate()
    raise TypeError(
        "calibrate must be None, a spec string ('whiten', 'flow', 'natsv:k=5', ...), "
        "an unfitted bertflow calibrator, or a callable returning a fresh transformer"
    )


def _result_dict(r):
    d = {"spearman": r.spearman, "pearson": r.pearson, "pairs": r.pairs}
    subsets = r.subsets()
    if len(subsets) > 1:
        d["subsets"] = subsets
    return d


def tasks(data=None, tasks=None):
    """The loaded tasks (objects with ``name``, ``sentences()``,
    ``fit_sentences()`` and ``evaluate(embeddings, aggregate)``); ``data`` as
    in :func:`evaluate` (found as ``bertflow eval`` finds it)."""
    _, ts = _bertflow.load_tasks(_path(data), _task_names(tasks))
    return ts


def _path(data):
    if data is None:
        return None
    import os

    return os.fspath(data)


def _task_names(tasks):
    if tasks is None:
        return None
    if isinstance(tasks, str):
        tasks = [tasks]
    tasks = list(tasks)
    for t in tasks:
        if not isinstance(t, str):
            raise TypeError(f"task names must be str, not {type(t).__name__}")
    return tasks


def evaluate(embed, data=None, tasks=None, aggregate="all", calibrate=None):
    """Spearman and Pearson correlations (x100) of cosine similarities with the
    gold scores, on the STS benchmarks.

    Args:
        embed: A callable from a list of str to an array of shape
            ``(len(sentences), d)``: ``bertflow.Encoder(...)`` (or its
            ``encode``), ``SentenceTransformer(...).encode``, an API client...
            It is called once per task with the task's distinct sentences (and
            once more with the fit sentences when ``calibrate`` is given).
        data: The STS data folder. Default: ``$BERTFLOW_DATA``, else
            ``../shared/data/sts`` from the working directory, else from a
            folder above the installed package (a checkout's): the rule of
            ``bertflow eval`` (``bertflow.defaults()["data"]``).
        tasks: Task names (``"STS12"`` ... ``"STS16"``, ``"STS-B"``,
            ``"SICK-R"``; case-insensitive, ``"stsb"``/``"sick"`` too), one
            name, or None for all seven. Results come in the canonical order.
        aggregate: How STS12-16's subsets combine: ``"all"`` (one correlation
            over the concatenated subsets, SimCSE's), ``"wmean"`` (subset
            correlations weighted by size) or ``"mean"`` (plain mean,
            BERT-flow's and BERT-whitening's).
        calibrate: None for raw embeddings, or a calibrator fitted per task on
            that task's scored sentences (every split of STS-B and SICK-R,
            labels unused), as ``bertflow eval --fit KIND --on target``: a spec
            string (``"whiten"``, ``"flow"``, ``"natsv:k=5"``...), an unfitted
            bertflow calibrator (cloned per task), or a callable returning a
            fresh scikit-learn transformer.

    Returns:
        dict: ``{"tasks": {name: {"spearman", "pearson", "pairs"[, "subsets"]}},
        "average": {"spearman", "pearson"}, "aggregate": ..., "calibrator":
        spec or None, "fit_on": "target" (when calibrated)}``. Numbers are not
        rounded (``bertflow eval --json`` rounds to 2 decimals).

    Raises:
        FileNotFoundError: the data folder or a task file is missing.
        ValueError: an unknown task or aggregate, embeddings with the wrong
            number of rows or NaN/inf values.
    """
    if not callable(embed):
        raise TypeError(f"embed must be a callable(list[str]) -> array, not {type(embed).__name__}")
    if not isinstance(aggregate, str) or aggregate.lower() not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; valid: all, wmean, mean")
    if calibrate is not None:
        _new_calibrator(calibrate)  # fail before any encoding
    _, loaded = _bertflow.load_tasks(_path(data), _task_names(tasks))
    label = None

    def vectors(i):
        # Core's per-task loop (bertflow eval's) calls this for each task in order.
        nonlocal label
        t = loaded[i]
        x = _embed(embed, t.sentences(), t.name)
        if calibrate is not None:
            cal = _new_calibrator(calibrate)
            fit_x = _embed(embed, t.fit_sentences(), f"{t.name} (fit sentences)")
            cal.fit(fit_x)
            x = as_matrix(cal.transform(x), f"the calibrated embeddings of {t.name}")
            if label is None:
                if isinstance(calibrate, str):
                    label = calibrate
                elif isinstance(cal, Calibrator):
                    label = cal.spec
                else:
                    label = type(cal).__name__
        return np.ascontiguousarray(x, dtype=np.float32)

    results = _bertflow.score_tasks(loaded, aggregate.lower(), vectors)
    out = {t.name: _result_dict(r) for t, r in zip(loaded, results)}
    avg = _bertflow.average_results(results)
    res = {
        "tasks": out,
        "average": None if avg is None else {"spearman": avg[0], "pearson": avg[1]},
        "aggregate": aggregate.lower(),
        "calibrator": label,
    }
    if calibrate is not None:
        res["fit_on"] = "target"
    return res
