"""The openai client against `bertflow serve` with a calibrator that ends in
a quantizer stage: `encoding_format="float"` (and the client's default,
base64 decoded as float32) still give the calibrated float vectors, and
`encoding_format="ubinary"` (passed through by the client) gives exactly the
bytes `bertflow encode --calibrator` writes."""


import numpy as np
import pytest

from conftest import SENTENCES, served

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def coded(tmp_path_factory, run_cli, model_dir):
    """A pca:k=16 calibrator ending in ubinary codes, with what `encode` writes.

    `itq=false`: after `pca` the bits default to an ITQ rotation, whose codes are
    the signs of the rotated vectors, not of the served floats (test_itq_codes_match_encode)."""
    d = tmp_path_factory.mktemp("codes")
    (d / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    cal = d / "pca.safetensors"
    run_cli("fit", "--model", model_dir, "--no-cache", "--kind", "pca:k=16",
            "--quantize", "ubinary:itq=false", "--on", d / "in.txt", "--output", cal)
    codes = d / "codes.npy"
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", cal,
            "--input", d / "in.txt", "--output", codes)
    return cal, np.load(codes)


@pytest.fixture(scope="module")
def server(bertflow_bin, model_dir, coded):
    cal, _ = coded
    with served(bertflow_bin, "--model", model_dir, "--calibrator", cal, "--host", "127.0.0.1",
                "--workers", "2") as url:
        yield url


def test_openai_client_floats_and_codes(server, coded):
    _, want = coded
    assert want.dtype == np.uint8 and want.shape == (len(SENTENCES), 2)
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    floats = client.embeddings.create(input=SENTENCES, model="m", encoding_format="float")
    got = np.array([d.embedding for d in floats.data])
    assert got.shape == (len(SENTENCES), 16)
    # The codes are the sign bits of those floats, packed MSB-first.
    np.testing.assert_array_equal(np.packbits(got > 0, axis=1), want)
    default = client.embeddings.create(input=SENTENCES, model="m")
    np.testing.assert_allclose(np.array([d.embedding for d in default.data]), got, atol=1e-6)
    codes = client.embeddings.create(input=SENTENCES, model="m", encoding_format="ubinary")
    np.testing.assert_array_equal(np.array([d.embedding for d in codes.data]), want)
    with pytest.raises(openai.UnprocessableEntityError, match="binary or ubinary"):
        client.embeddings.create(input=SENTENCES, model="m", encoding_format="int8")


def test_itq_codes_match_encode(tmp_path, run_cli, bertflow_bin, model_dir):
    """With the default ITQ rotation after pca, the served codes are still exactly
    the bytes `encode` writes (the floats stay unrotated: a rotation keeps cosines)."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    cal = tmp_path / "itq.safetensors"
    run_cli("fit", "--model", model_dir, "--no-cache", "--kind", "pca:k=16",
            "--quantize", "ubinary", "--on", tmp_path / "in.txt", "--output", cal)
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", cal,
            "--input", tmp_path / "in.txt", "--output", tmp_path / "codes.npy")
    want = np.load(tmp_path / "codes.npy")
    with served(bertflow_bin, "--model", model_dir, "--calibrator", cal, "--host", "127.0.0.1",
                "--workers", "2") as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
        codes = client.embeddings.create(input=SENTENCES, model="m", encoding_format="ubinary")
    np.testing.assert_array_equal(np.array([d.embedding for d in codes.data]), want)
