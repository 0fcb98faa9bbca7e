"""The clients people already point at text-embeddings-inference and OpenAI,
unchanged, against `bertflow serve`: huggingface_hub's InferenceClient
(feature_extraction, sentence_similarity) and the openai client (float and
base64, dimensions, models.list) give the calibrated vectors `bertflow encode`
writes, within 1e-5."""

import base64

import numpy as np
import pytest

from conftest import SENTENCES, served

huggingface_hub = pytest.importorskip("huggingface_hub")
openai = pytest.importorskip("openai")

FIT = SENTENCES + [
    "A dog is barking at the mailman.",
    "The children play football in the park.",
    "She poured a cup of hot coffee.",
    "The train arrives at nine in the morning.",
]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, run_cli, model_dir):
    """A standard-normalisation calibrator fitted on a few sentences, and the
    vectors `bertflow encode` makes with it (not normalised)."""
    d = tmp_path_factory.mktemp("tei")
    (d / "fit.txt").write_text("\n".join(FIT) + "\n")
    (d / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    cal = d / "sn.json"
    run_cli("fit", "--model", model_dir, "--no-cache", "--kind", "sn", "--on", d / "fit.txt",
            "--output", cal)
    out = d / "want.npy"
    run_cli("encode", "--model", model_dir, "--no-cache", "--calibrator", cal,
            "--input", d / "in.txt", "--output", out)
    return cal, np.load(out)


@pytest.fixture(scope="module")
def server(bertflow_bin, model_dir, calibrated):
    """`bertflow serve` with the calibrator on a free port; yields its base URL."""
    cal, _ = calibrated
    with served(bertflow_bin, "--model-id", model_dir, "--calibrator", cal,
                "--hostname", "127.0.0.1", "--workers", "2") as url:
        yield url


def unit(m):
    m = np.asarray(m, dtype=np.float64)
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def test_inference_client_feature_extraction_gives_the_calibrated_vectors(server, calibrated):
    _, want = calibrated
    client = huggingface_hub.InferenceClient(model=server)
    for i, text in enumerate(SENTENCES):
        got = np.asarray(client.feature_extraction(text))
        assert got.shape == (1, want.shape[1])
        # TEI's default: unit vectors.
        np.testing.assert_allclose(got[0], unit(want[i]), atol=1e-5)
    raw = np.asarray(client.feature_extraction(SENTENCES[0], normalize=False))
    np.testing.assert_allclose(raw[0], want[0], atol=1e-5)
    # The calibrator changed the vectors: unit(raw) is not the uncalibrated model's.
    assert np.linalg.norm(want[0]) > 1.5


def test_inference_client_sentence_similarity_gives_calibrated_cosines(server, calibrated):
    _, want = calibrated
    client = huggingface_hub.InferenceClient(model=server)
    got = client.sentence_similarity(SENTENCES[0], other_sentences=SENTENCES[1:])
    w = unit(want)
    np.testing.assert_allclose(got, w[1:] @ w[0], atol=1e-5)


def test_openai_client_float_base64_dimensions_and_models(server, calibrated, model_dir):
    _, want = calibrated
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    ids = [m.id for m in client.models.list()]
    assert ids == [str(model_dir)]
    # Whatever model the request names, the answer names the served one.
    r = client.embeddings.create(input=SENTENCES, model="text-embedding-3-small",
                                 encoding_format="float")
    assert r.model == ids[0]
    got = np.array([d.embedding for d in r.data])
    np.testing.assert_allclose(got, want, atol=1e-5)
    r = client.embeddings.create(input=SENTENCES, model=ids[0], encoding_format="base64")
    rows = [
        np.frombuffer(base64.b64decode(d.embedding), dtype="<f4")
        if isinstance(d.embedding, str) else np.asarray(d.embedding)
        for d in r.data
    ]
    np.testing.assert_allclose(np.array(rows), want, atol=1e-5)
    # The client's default (base64 on the wire, decoded by the client).
    r = client.embeddings.create(input=SENTENCES[:3], model=ids[0])
    np.testing.assert_allclose(np.array([d.embedding for d in r.data]), want[:3], atol=1e-5)
    r = client.embeddings.create(input=SENTENCES[:3], model=ids[0], dimensions=64)
    got = np.array([d.embedding for d in r.data])
    assert got.shape == (3, 64)
    np.testing.assert_allclose(got, want[:3, :64], atol=1e-5)
