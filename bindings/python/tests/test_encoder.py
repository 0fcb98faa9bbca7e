"""bertflow.Encoder: equal to the CLI, cache, pickling, bad input."""

import pickle
import threading
import time

import numpy as np
import pytest

import bertflow
from conftest import SENTENCES


def test_poolings_listed():
    names = [n for n, _ in bertflow.POOLINGS]
    for p in ("cls", "pooler", "last-avg", "first-last-avg", "emb-avg", "layers:i,j,..."):
        assert p in names
    assert bertflow.poolings() == list(bertflow.POOLINGS)


@pytest.mark.parametrize("pooling", ["last-avg", "first-last-avg", "cls"])
def test_encode_equals_cli(model_dir, run_cli, tmp_path, pooling):
    src = tmp_path / "s.txt"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "x.npy"
    run_cli("encode", "--model", model_dir, "--pooling", pooling, "--no-cache",
            "--input", src, "--output", out)
    cli = np.load(out)
    enc = bertflow.Encoder(model_dir, pooling=pooling, cache=False)
    x = enc.encode(SENTENCES)
    assert x.dtype == np.float32 and x.shape == (len(SENTENCES), 384) == cli.shape
    assert enc.dimension == 384 and enc.pooling == pooling
    np.testing.assert_allclose(x, cli, rtol=0, atol=1e-6)


def test_encode_is_batch_and_thread_invariant(model_dir, encoder):
    x = encoder.encode(SENTENCES)
    one = bertflow.Encoder(model_dir, threads=1, cache=False)
    np.testing.assert_array_equal(one.encode(SENTENCES, batch_size=1), x)
    np.testing.assert_array_equal(encoder.encode(SENTENCES[3:5]), x[3:5])
    # callable, tuple and generator input
    np.testing.assert_array_equal(encoder(tuple(SENTENCES)), x)
    np.testing.assert_array_equal(encoder.encode(s for s in SENTENCES), x)


def test_cache_round_trip(model_dir, tmp_path, encoder):
    cached = bertflow.Encoder(model_dir, cache=tmp_path / "cache")
    assert cached.cache_dir is not None
    a = cached.encode(SENTENCES)
    files = list((tmp_path / "cache").glob("*.bfemb"))
    assert len(files) == 1
    b = cached.encode(SENTENCES)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, encoder.encode(SENTENCES))
    assert bertflow.Encoder(model_dir, cache=False).cache_dir is None


def test_progress_callback(encoder):
    seen = []
    encoder.encode(SENTENCES, batch_size=2, progress=lambda done, total: seen.append((done, total)))
    assert seen
    assert all(t == len(SENTENCES) for _, t in seen)
    assert max(d for d, _ in seen) == len(SENTENCES)
    assert all(0 < d <= len(SENTENCES) for d, _ in seen)


def test_pickle_reloads_the_model(encoder):
    again = pickle.loads(pickle.dumps(encoder))
    assert again.fingerprint == encoder.fingerprint
    np.testing.assert_array_equal(again.encode(SENTENCES[:3]), encoder.encode(SENTENCES[:3]))


def test_identity_matches_cli_format(encoder):
    assert encoder.identity == f"all-MiniLM-L6-v2@{encoder.fingerprint}"
    assert len(encoder.fingerprint) == 16


def test_gil_released_while_encoding(encoder):
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.0005)

    texts = [f"sentence number {i} about {SENTENCES[i % len(SENTENCES)]}" for i in range(96)]
    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    before = len(ticks)
    encoder.encode(texts, batch_size=8)
    during = len(ticks) - before
    done.set()
    t.join()
    # With the GIL held for the whole call the counter could not advance.
    assert during > 3, during


@pytest.mark.parametrize(
    "texts, exc, msg",
    [
        ("a single string", TypeError, "single str"),
        (b"bytes", TypeError, "single bytes"),
        ([], ValueError, "empty"),
        (["ok", 3], TypeError, r"texts\[1\] is int"),
        (["ok", None], TypeError, r"texts\[1\] is NoneType"),
        (None, TypeError, "list of str"),
        (42, TypeError, "list of str"),
    ],
)
def test_bad_texts(encoder, texts, exc, msg):
    with pytest.raises(exc, match=msg):
        encoder.encode(texts)


def test_bad_arguments(model_dir, encoder, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        bertflow.Encoder(tmp_path / "no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        bertflow.Encoder(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown pooling"):
        bertflow.Encoder(model_dir, pooling="last2avg")
    with pytest.raises(ValueError, match="out of range"):
        bertflow.Encoder(model_dir, pooling="layers:0,9")
    with pytest.raises(ValueError, match="max length"):
        bertflow.Encoder(model_dir, max_len=100000)
    with pytest.raises(ValueError, match="threads"):
        bertflow.Encoder(model_dir, threads=0)
    with pytest.raises(TypeError):
        bertflow.Encoder(model_dir, pooling=3)
    with pytest.raises(ValueError, match="batch_size"):
        encoder.encode(["a"], batch_size=0)
    with pytest.raises(TypeError, match="progress"):
        encoder.encode(["a"], progress="yes")


def test_help_explains_every_argument():
    doc = bertflow.Encoder.__doc__
    for arg in ("model", "pooling", "max_len", "threads", "cache"):
        assert f"{arg}:" in doc
    for arg in ("texts", "batch_size", "progress"):
        assert f"{arg}:" in bertflow.Encoder.encode.__doc__
