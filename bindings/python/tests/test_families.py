"""Every encoder family through the Python front ends: the tiny random
checkpoints of crates/encoder/tests/fixtures (RoBERTa, XLM-RoBERTa,
CamemBERT, DistilBERT, MPNet, ModernBERT; made with transformers by
scripts/reference/make_tiny_models.py and make_tiny_modernbert.py) through
`bertflow.Encoder` and `bertflow.spark.encode` equal transformers' vectors
stored beside them (golden.json), several sentences padded into one batch,
a truncated one included."""

import json

import numpy as np
import pytest

import bertflow
from conftest import ROOT, spark_vectors

FIXTURES = ROOT / "crates" / "encoder" / "tests" / "fixtures"
FAMILIES = ["roberta", "xlm-roberta", "camembert", "distilbert", "mpnet", "modernbert"]
POOLINGS = ["last-avg", "cls", "first-last-avg", "emb-avg"]


def golden(family):
    """(model dir, texts, {pooling: [n, d] vectors}) from transformers. The two
    fixture scripts store the vectors per case or per pooling."""
    d = FIXTURES / f"tiny-{family}"
    g = json.loads((d / "golden.json").read_text())
    texts = [c["text"] for c in g["cases"]]
    if isinstance(g["poolings"], dict):
        want = {p: np.array(g["poolings"][p], np.float32) for p in POOLINGS}
    else:
        want = {p: np.array([c[p] for c in g["cases"]], np.float32) for p in POOLINGS}
    return d, texts, want


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pooling", POOLINGS)
def test_encoder_equals_transformers(family, pooling):
    d, texts, want = golden(family)
    enc = bertflow.Encoder(str(d), pooling, threads=1)
    got = enc.encode(texts, batch_size=len(texts))
    assert got.shape == want[pooling].shape, (family, pooling)
    assert np.abs(got - want[pooling]).max() <= 1e-5, (family, pooling)
    # int8 stays close (per-channel weights, 8-bit activations).
    q = bertflow.Encoder(str(d), pooling, threads=1, precision="int8").encode(texts)
    cos = (q * want[pooling]).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(want[pooling], axis=1)
    assert cos.min() > 0.99, (family, pooling, cos)


def test_spark_encode_every_family(spark):
    import bertflow.spark as bs

    for family in FAMILIES:
        d, texts, want = golden(family)
        df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id long, text string").repartition(2)
        ids, X = spark_vectors(bs.encode(df, "text", model=str(d), pooling="last-avg"))
        assert list(ids) == list(range(len(texts))), family
        assert np.abs(X - want["last-avg"]).max() <= 1e-5, family
