"""bertflow.sts.evaluate: the CLI's numbers for bertflow's encoder, any callable, bad input."""

import json

import numpy as np
import pytest

import bertflow
from bertflow import sts


def cli_eval(run_cli, model_dir, data_dir, cache, *args):
    r = run_cli("eval", "--model", model_dir, "--data", data_dir, "--cache-dir", cache,
                "--json", *args)
    return json.loads(r.stdout)


def assert_same(py, cli):
    assert list(py["tasks"]) == list(cli["tasks"])
    for name, c in cli["tasks"].items():
        p = py["tasks"][name]
        assert p["pairs"] == c["pairs"]
        assert round(p["spearman"], 2) == c["spearman"], name
        assert round(p["pearson"], 2) == c["pearson"], name
    assert round(py["average"]["spearman"], 2) == cli["average"]["spearman"]


def test_encoder_with_whitening_equals_cli(run_cli, model_dir, data_dir, tmp_path):
    # The CLI encodes STS16 into a private cache; Python reads the same entries,
    # so this checks the sentence lists, the per-task fit and the scoring
    # (encode itself is compared in test_encoder.py).
    cache = tmp_path / "cache"
    cli = cli_eval(run_cli, model_dir, data_dir, cache, "--tasks", "STS16", "--fit", "whiten")
    enc = bertflow.Encoder(model_dir, cache=cache)
    py = sts.evaluate(enc, data=data_dir, tasks=["sts16"], calibrate="whiten")
    assert_same(py, cli)
    assert py["calibrator"] == "whiten" and py["fit_on"] == "target"
    assert py["aggregate"] == "all"
    assert set(py["tasks"]["STS16"]["subsets"]) == {
        "answer-answer", "headlines", "plagiarism", "postediting", "question-question"}
    raw_cli = cli_eval(run_cli, model_dir, data_dir, cache, "--tasks", "STS16",
                       "--aggregate", "mean")
    raw = sts.evaluate(enc.encode, data=data_dir, tasks="STS16", aggregate="mean")
    assert_same(raw, raw_cli)
    assert raw["calibrator"] is None and "fit_on" not in raw
    # An unfitted calibrator object and a factory give the same numbers as the spec.
    obj = sts.evaluate(enc, data=data_dir, tasks=["STS16"], calibrate=bertflow.Whitening())
    assert obj["tasks"] == py["tasks"]


def test_any_callable(data_dir):
    def bag_of_words(sentences):
        out = np.zeros((len(sentences), 256), np.float32)
        for i, s in enumerate(sentences):
            for w in s.lower().split():
                out[i, hash(w) % 256] += 1
        return out + 1e-3

    r = sts.evaluate(bag_of_words, data=data_dir, tasks=["STS-B"])
    t = r["tasks"]["STS-B"]
    assert t["pairs"] == 1379
    assert 30 < t["spearman"] < 80  # lexical overlap correlates, but far from perfect
    assert r["average"]["spearman"] == t["spearman"]


def test_sklearn_factory(data_dir):
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(0)
    vocab = {}

    def emb(sentences):
        rows = []
        for s in sentences:
            v = np.zeros(64)
            for w in s.lower().split():
                if w not in vocab:
                    vocab[w] = rng.standard_normal(64)
                v += vocab[w]
            rows.append(v)
        return np.array(rows)

    r = sts.evaluate(emb, data=data_dir, tasks=["STS-B"], calibrate=lambda: PCA(16))
    assert r["calibrator"] == "PCA" and np.isfinite(r["tasks"]["STS-B"]["spearman"])


def test_bad_input(data_dir, tmp_path):
    ok = lambda s: np.ones((len(s), 4)) + np.arange(len(s))[:, None] % 3  # noqa: E731
    with pytest.raises(ValueError, match="unknown task"):
        sts.evaluate(ok, data=data_dir, tasks=["STS99"])
    with pytest.raises(ValueError, match="tasks is empty"):
        sts.evaluate(ok, data=data_dir, tasks=[])
    with pytest.raises(FileNotFoundError, match="not found"):
        sts.evaluate(ok, data=tmp_path / "nowhere", tasks=["STS16"])
    with pytest.raises(ValueError, match="aggregate"):
        sts.evaluate(ok, data=data_dir, tasks=["STS16"], aggregate="median")
    with pytest.raises(TypeError, match="callable"):
        sts.evaluate("not callable", data=data_dir)
    with pytest.raises(ValueError, match="rows"):
        sts.evaluate(lambda s: np.ones((3, 4)), data=data_dir, tasks=["STS16"])
    with pytest.raises(ValueError, match="2-D"):
        sts.evaluate(lambda s: np.ones(len(s)), data=data_dir, tasks=["STS16"])

    def nan(s):
        x = np.ones((len(s), 4))
        x[5, 1] = np.nan
        return x

    with pytest.raises(ValueError, match="non-finite"):
        sts.evaluate(nan, data=data_dir, tasks=["STS16"])
    with pytest.raises(ValueError, match="invalid calibrator spec"):
        sts.evaluate(ok, data=data_dir, tasks=["STS16"], calibrate="whitening")
    with pytest.raises(TypeError, match="calibrate"):
        sts.evaluate(ok, data=data_dir, tasks=["STS16"], calibrate=3)


@pytest.mark.slow
def test_all_tasks_equal_cli(run_cli, model_dir, data_dir, tmp_path):
    cache = tmp_path / "cache"
    for pooling, fit in (("last-avg", None), ("first-last-avg", "natsv:k=5")):
        args = ["--pooling", pooling] + (["--fit", fit] if fit else [])
        cli = cli_eval(run_cli, model_dir, data_dir, cache, *args)
        enc = bertflow.Encoder(model_dir, pooling=pooling, cache=False)
        assert_same(sts.evaluate(enc, data=data_dir, calibrate=fit), cli)
