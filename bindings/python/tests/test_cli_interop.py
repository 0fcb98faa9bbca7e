"""Calibrator files cross between Python and the `bertflow` command both ways."""

import numpy as np
import pytest

import bertflow
from conftest import SENTENCES

CORPUS = SENTENCES * 1 + [f"{a} {b}" for a in SENTENCES[:8] for b in SENTENCES[4:10]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop")
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    sents = d / "s.txt"
    sents.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return d, corpus, sents


def test_python_file_read_by_cli(encoder, run_cli, model_dir, files):
    d, _, sents = files
    w = bertflow.Whitening(k=16).fit(encoder.encode(CORPUS), source=encoder)
    assert w.meta_["model"] == encoder.identity and w.meta_["pooling"] == "last-avg"
    p = d / "py-whiten.safetensors"
    w.save(p)
    out = d / "z.npy"
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p,
            "--input", sents, "--output", out)
    np.testing.assert_allclose(np.load(out), w.transform(encoder.encode(SENTENCES)), atol=1e-5)


def test_cli_file_read_by_python(encoder, run_cli, model_dir, files):
    d, corpus, sents = files
    for kind in ("natsv:k=3", "sn", "flow:levels=2,steps=1,width=8,seed=5"):
        p = d / f"cli-{kind.split(':')[0]}.safetensors"
        run_cli("fit", "--model", model_dir, "--no-cache", "--kind", kind, "--on", corpus,
                "--output", p)
        c = bertflow.load(p)
        assert c.meta_["model"] == encoder.identity
        assert c.meta_["fit_corpus_size"] == len(set(CORPUS))
        out = d / "z.npy"
        run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p,
                "--input", sents, "--output", out)
        np.testing.assert_allclose(c.transform(encoder.encode(SENTENCES)), np.load(out),
                                   atol=1e-5)
        # The same fit in Python gives the same calibrator (same sentences, same order).
        py = bertflow.calibrator(kind).fit(encoder.encode(list(dict.fromkeys(CORPUS))))
        np.testing.assert_allclose(py.transform(encoder.encode(SENTENCES)), np.load(out),
                                   atol=1e-4)
        # Saved again from Python: the CLI still reads it.
        p2 = d / "resaved.safetensors"
        c.save(p2)
        run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p2,
                "--input", sents, "--output", out)
        np.testing.assert_allclose(c.transform(encoder.encode(SENTENCES)), np.load(out),
                                   atol=1e-5)


def test_external_calibrator_needs_allow_mismatch(encoder, run_cli, model_dir, files):
    d, _, sents = files
    p = d / "external.safetensors"
    w = bertflow.StandardNorm().fit(encoder.encode(CORPUS))
    w.save(p)
    out = d / "ext.npy"
    r = run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p,
                "--input", sents, "--output", out, check=False)
    assert r.returncode != 0 and "external:embeddings@" in r.stderr
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", p, "--allow-mismatch",
            "--input", sents, "--output", out)
    np.testing.assert_allclose(np.load(out), w.transform(encoder.encode(SENTENCES)), atol=1e-5)


def test_external_fingerprint_same_in_python_and_cli(rng, run_cli, files):
    """Fitting on an array in Python and on its .npy with the CLI records the same input."""
    d, _, _ = files
    x = rng.standard_normal((300, 12)).astype(np.float32) @ rng.standard_normal((12, 12)).astype(np.float32)
    np.save(d / "x.npy", x)
    p = d / "cli-ext.safetensors"
    run_cli("fit", "--embeddings", d / "x.npy", "--kind", "whiten", "--label", "vec",
            "--output", p)
    cli = bertflow.load(p)
    py = bertflow.Whitening().fit(x, source="vec")
    assert cli.meta_["external"] == py.meta_["external"]
    assert cli.meta_["model"] == py.meta_["model"] == f"external:vec@{py.meta_['external']['fingerprint']}"
    np.testing.assert_allclose(cli.transform(x), py.transform(x), atol=1e-5)
