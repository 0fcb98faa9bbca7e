"""Prompts in Python: ``Encoder.encode(..., prompt_name=, prompt=)``,
``encode_query`` and ``encode_document`` on a tiny sentence-transformers
directory with prompts equal sentence-transformers' own vectors
(crates/encoder/tests/fixtures/tiny-st/prompts/golden.json, made by
scripts/reference/make_tiny_st_prompts.py) within 1e-5; errors; a Calibrator
fitted with ``source=`` an Encoder records its prompt."""

import json

import numpy as np
import pytest

import bertflow
from conftest import ROOT

DIR = ROOT / "crates" / "encoder" / "tests" / "fixtures" / "tiny-st" / "prompts"
GOLDEN = json.loads((DIR / "golden.json").read_text())
TEXTS = GOLDEN["texts"]


@pytest.fixture(scope="module")
def enc():
    return bertflow.Encoder(str(DIR), pooling="st", cache=False)


@pytest.mark.parametrize("case", sorted(GOLDEN["cases"]))
def test_every_way_of_choosing_a_prompt_equals_sentence_transformers(enc, case):
    c = GOLDEN["cases"][case]
    got = getattr(enc, c["method"])(TEXTS, **c["kwargs"])
    want = np.array(c["vectors"], dtype=np.float32)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-5, case


def test_prompts_and_default(enc):
    assert enc.prompts == GOLDEN["prompts"]
    assert enc.default_prompt == "someone is playing "
    plain = bertflow.Encoder(str(DIR), pooling="st", cache=False, max_len=None)
    np.testing.assert_array_equal(plain(TEXTS), enc.encode(TEXTS, prompt_name="query"))


def test_a_model_without_prompts(tmp_path):
    tiny = ROOT / "crates" / "encoder" / "tests" / "fixtures" / "tiny-bert"
    e = bertflow.Encoder(str(tiny), cache=False)
    assert e.prompts == {} and e.default_prompt is None
    # encode_query without a query prompt: no prompt (as sentence-transformers 6).
    np.testing.assert_array_equal(e.encode_query(["the cat"]), e.encode(["the cat"]))
    with pytest.raises(ValueError, match="its prompts: none"):
        e.encode(["the cat"], prompt_name="query")


def test_errors(enc):
    with pytest.raises(ValueError, match=r'"nope" is not a prompt.*"query", "document", "search", "empty"'):
        enc.encode(TEXTS, prompt_name="nope")
    with pytest.raises(ValueError, match="not both"):
        enc.encode(TEXTS, prompt_name="query", prompt="x")
    with pytest.raises(TypeError, match="prompt_name must be a str"):
        enc.encode(TEXTS, prompt_name=3)


def test_a_calibrator_records_the_encoders_prompt(tmp_path):
    enc = bertflow.Encoder(str(DIR), pooling="last-avg", cache=False)
    corpus = [f"{w} and {t}" for t in TEXTS for w in ("the dog", "a cat", "a man", "someone")]
    cal = bertflow.calibrator("sn").fit(enc.encode(corpus), source=enc)
    path = tmp_path / "sn.safetensors"
    cal.save(path)
    assert cal._fitted().prompt == "someone is playing "
    same = bertflow.Encoder(str(DIR), pooling="last-avg", cache=False, calibrator=path)
    same.encode(TEXTS)
    with pytest.raises(ValueError, match="these have prompt"):
        same.encode(TEXTS, prompt_name="document")
    np.testing.assert_allclose(
        same.encode(TEXTS, prompt_name="query"), cal.transform(enc.encode(TEXTS)), atol=1e-5
    )
