"""Token weighting and precision from Python, and their files crossing to the CLI."""

import numpy as np
import pytest

import bertflow
from conftest import SENTENCES

CORPUS = SENTENCES + [f"{a} {b}" for a in SENTENCES[:6] for b in SENTENCES[3:8]]


@pytest.fixture(scope="module")
def usif(model_dir):
    return bertflow.Encoder(model_dir, cache=False, weighting="usif").fit_weighting(CORPUS)


def test_weighting_needs_frequencies_and_matches_the_cli(model_dir, run_cli, tmp_path, usif):
    enc = bertflow.Encoder(model_dir, cache=False, weighting="usif")
    assert enc.weighting == "usif:special=drop,punct=drop"
    with pytest.raises(ValueError, match="fit_weighting"):
        enc.encode(SENTENCES)
    # Counting on the corpus in Python equals the CLI counting on its input.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = tmp_path / "cli.npy"
    run_cli("encode", "--model", model_dir, "--no-cache", "--weighting", "usif",
            "--input", corpus, "--output", out)
    np.testing.assert_allclose(usif.encode(CORPUS), np.load(out), atol=1e-5)
    plain = bertflow.Encoder(model_dir, cache=False).encode(CORPUS)
    assert np.abs(usif.encode(CORPUS) - plain).max() > 1e-3


def test_weighted_calibrator_crosses_both_ways(model_dir, run_cli, tmp_path, usif):
    x = usif.encode(CORPUS)
    c = bertflow.StandardNorm().fit(x, source=usif)
    assert c.meta_["weighting"]["spec"] == "usif:special=drop,punct=drop"
    p = tmp_path / "sn-usif.safetensors"
    c.save(p)
    sents = tmp_path / "s.txt"
    sents.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "z.npy"
    # The CLI applies the weights recorded in the Python file by itself.
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p,
            "--input", sents, "--output", out)
    np.testing.assert_allclose(np.load(out), c.transform(usif.encode(SENTENCES)), atol=1e-5)
    # A fresh Python encoder takes the file's weights.
    fresh = bertflow.Encoder(model_dir, cache=False, weighting="usif")
    fresh.use_weights_of(bertflow.load(p))
    np.testing.assert_array_equal(fresh.encode(SENTENCES), usif.encode(SENTENCES))
    with pytest.raises(ValueError, match="fitted with weighting usif"):
        bertflow.Encoder(model_dir, cache=False).use_weights_of(bertflow.load(p))


def test_bad_weighting_and_precision(model_dir):
    with pytest.raises(ValueError, match="unknown scheme"):
        bertflow.Encoder(model_dir, cache=False, weighting="tfidf")
    with pytest.raises(ValueError, match="averaging poolings"):
        bertflow.Encoder(model_dir, pooling="cls", cache=False, weighting="usif")
    with pytest.raises(ValueError, match="unknown precision"):
        bertflow.Encoder(model_dir, cache=False, precision="fp8")
    with pytest.raises(TypeError, match="weighting"):
        bertflow.Encoder(model_dir, cache=False, weighting=1)


def test_int8_encoder_is_close_to_fp32(model_dir):
    fp32 = bertflow.Encoder(model_dir, cache=False)
    int8 = bertflow.Encoder(model_dir, cache=False, precision="int8")
    assert int8.precision == "int8" and fp32.precision == "fp32"
    a, b = fp32.encode(SENTENCES), int8.encode(SENTENCES)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.mean() > 0.99 and cos.min() > 0.95, cos
    assert np.abs(a - b).max() > 0  # really another path
