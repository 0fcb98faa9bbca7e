"""A newcomer's second hour (issue 48, item 5), the Python side: an error that
names the fit to run, one data-lookup rule with ``bertflow eval``, and honest
docstrings. The CLI's traps are held in ``crates/cli/tests/it/traps.rs``."""

import os
import subprocess
import sys

import numpy as np
import pytest

import bertflow
from conftest import ROOT, SENTENCES


def test_a_calibrator_fitted_without_source_names_the_fit(model_dir):
    enc = bertflow.Encoder(model_dir, pooling="last-avg", cache=False)
    X = enc.encode(SENTENCES * 3)
    bare = bertflow.StandardNorm().fit(X)
    with pytest.raises(ValueError) as e:
        bertflow.Encoder(model_dir, pooling="last-avg", cache=False, calibrator=bare)
    message = str(e.value)
    assert "source=enc" in message, message
    assert "fit(" in message, message
    # The fit it names works.
    named = bertflow.StandardNorm().fit(X, source=enc)
    calibrated = bertflow.Encoder(model_dir, pooling="last-avg", cache=False, calibrator=named)
    assert calibrated.encode(SENTENCES[:2]).shape == (2, X.shape[1])


def test_dimension_is_the_calibrated_width(model_dir):
    enc = bertflow.Encoder(model_dir, pooling="last-avg", cache=False)
    X = enc.encode(SENTENCES * 3)
    pca = bertflow.Pca(k=8).fit(X, source=enc)
    small = bertflow.Encoder(model_dir, pooling="last-avg", cache=False, calibrator=pca)
    assert small.dimension == 8 == small.encode(SENTENCES[:2]).shape[1]
    doc = type(small).dimension.__doc__
    assert "calibrator" in doc and "hidden size" in doc, doc


def test_sts_tasks_finds_the_data_as_eval_does(tmp_path, data_dir):
    """From a directory outside the checkout, without $BERTFLOW_DATA,
    ``bertflow.sts.tasks()`` finds the checkout's data as ``bertflow eval``
    does (core's one rule: from the working directory, else above the
    installed package)."""
    if not (ROOT / ".." / "shared" / "data" / "sts" / "STS16").is_dir():
        pytest.skip("the data is not at the checkout's ../shared/data/sts")
    env = {k: v for k, v in os.environ.items() if k != "BERTFLOW_DATA"}
    code = (
        "import bertflow, json\n"
        "from bertflow import _bertflow\n"
        "d, ts = _bertflow.load_tasks(None, ['STS16'])\n"
        "print(json.dumps([str(d), bertflow.defaults()['data'], len(ts[0].sentences())]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import json

    found, default, n = json.loads(p.stdout)
    assert found == default
    assert os.path.samefile(found, ROOT / ".." / "shared" / "data" / "sts")
    assert n > 1000
