"""bertflow.st.export / `bertflow export`: a calibrated model as a
sentence-transformers directory.

CI checks the files against NumPy: the Dense module's arithmetic
``x @ W.T + b`` equals the calibrator's transform, the Pooling and module
configs say what bertflow computes, the CLI writes the same files as Python,
and what cannot be expressed is refused without leaving anything behind. The
slow group loads the directory with sentence-transformers in a Python that
has no bertflow (``ST_PYTHON``, else ``.venv-ref``) and compares its
``encode`` with bertflow's on STS-B test sentences.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import bertflow

from conftest import ROOT


def read_safetensors(path):
    """{name: array} of a float32 safetensors file, read with NumPy alone."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype="<f4").reshape(t["shape"])
    return out


@pytest.fixture(scope="module")
def stsb_sentences(data_dir):
    lines = (data_dir / "STSBenchmark" / "sts-test.csv").read_text(encoding="utf-8").splitlines()
    seen = []
    for line in lines:
        for s in line.split("\t")[5:7]:
            s = " ".join(s.split())
            if s and s not in seen:
                seen.append(s)
        if len(seen) >= 600:
            break
    return seen


@pytest.fixture(scope="module")
def raw(encoder, stsb_sentences):
    return encoder.encode(stsb_sentences)


def test_dense_equals_the_calibrator(encoder, raw, model_dir, tmp_path):
    cal = bertflow.Whitening().fit(raw[:500], source=encoder)
    out = tmp_path / "st"
    info = bertflow.st.export(out, model=model_dir, calibrator=cal)
    assert info["modules"] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
        "sentence_transformers.models.Dense",
    ]
    assert [m["path"] for m in json.loads((out / "modules.json").read_text())] == [
        "",
        "1_Pooling",
        "2_Dense",
    ]
    pooling = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    assert pooling["word_embedding_dimension"] == 384
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == encoder.max_len
    dense_cfg = json.loads((out / "2_Dense" / "config.json").read_text())
    w = read_safetensors(out / "2_Dense" / "model.safetensors")
    W, b = w["linear.weight"].astype(np.float64), w["linear.bias"].astype(np.float64)
    z = cal.transform(raw[500:])
    assert dense_cfg == {
        "in_features": 384,
        "out_features": z.shape[1],
        "bias": True,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    assert info["dimension"] == z.shape[1] == W.shape[0]
    got = raw[500:].astype(np.float64) @ W.T + b
    np.testing.assert_allclose(got, z, rtol=0, atol=1e-5 * np.abs(z).max())
    # The transformer's files are copied byte for byte.
    assert (out / "model.safetensors").read_bytes() == (model_dir / "model.safetensors").read_bytes()
    assert (out / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()


def test_cli_writes_the_same_directory(encoder, raw, run_cli, model_dir, tmp_path):
    cal = bertflow.calibrator("sn+natsv:k=3").fit(raw, source=encoder)
    cal.save(tmp_path / "c.safetensors")
    bertflow.st.export(tmp_path / "py", model=model_dir, calibrator=tmp_path / "c.safetensors", normalize=True)
    run_cli("export", "--model", model_dir, "--calibrator", tmp_path / "c.safetensors",
            "--normalize", "--output", tmp_path / "cli")
    for rel in ["modules.json", "1_Pooling/config.json", "2_Dense/config.json",
                "2_Dense/model.safetensors", "sentence_bert_config.json"]:
        assert (tmp_path / "py" / rel).read_bytes() == (tmp_path / "cli" / rel).read_bytes(), rel
    assert (tmp_path / "cli" / "3_Normalize").is_dir()


def test_cls_without_calibrator(model_dir, tmp_path):
    info = bertflow.st.export(tmp_path / "cls", model=model_dir, pooling="cls")
    assert info["modules"][-1] == "sentence_transformers.models.Pooling"
    pooling = json.loads((tmp_path / "cls" / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]


def test_the_flow_and_other_poolings_go_to_bertflows_module(encoder, raw, model_dir, tmp_path):
    flow = bertflow.Flow(levels=1, width=8, steps=2).fit(raw, source=encoder)
    info = bertflow.st.export(tmp_path / "flow", model=model_dir, calibrator=flow)
    assert info["needs_bertflow"] and info["modules"][-1] == _bertflow_module()
    cfg = json.loads((tmp_path / "flow" / "2_Bertflow" / "config.json").read_text())
    assert cfg == {"source": None, "calibrator": "calibrator.safetensors"}
    assert (tmp_path / "flow" / "2_Bertflow" / "calibrator.safetensors").read_bytes() == flow.to_bytes()
    assert "output_hidden_states" not in json.loads((tmp_path / "flow" / "config.json").read_text())

    fl = bertflow.Encoder(model_dir, pooling="first-last-avg", cache=False)
    w = bertflow.Whitening().fit(fl.encode(["a b c", "d e", "f g h i", "j"]), source=fl)
    info = bertflow.st.export(tmp_path / "fl", model=model_dir, pooling="first-last-avg", calibrator=w)
    types = [m["type"] for m in json.loads((tmp_path / "fl" / "modules.json").read_text())]
    assert types == ["sentence_transformers.models.Transformer", _bertflow_module(),
                     "sentence_transformers.models.Dense"]
    cfg = json.loads((tmp_path / "fl" / "2_Bertflow" / "config.json").read_text())
    assert cfg == {"source": {"mean": [1, 6]}, "calibrator": None}
    assert json.loads((tmp_path / "fl" / "config.json").read_text())["output_hidden_states"] is True


def _bertflow_module():
    return bertflow._bertflow.ST_MODULE


def test_the_module_name_is_where_the_class_lives():
    pytest.importorskip("torch", reason="bertflow.st.Calibrator is a torch module")
    cls = bertflow.st.Calibrator
    assert f"{cls.__module__}.{cls.__name__}" == _bertflow_module() == "bertflow.st.Calibrator"


def test_what_cannot_be_expressed_is_refused(model_dir, tmp_path):
    cases = [
        ({"pooling": "pooler"}, "pooler"),
        ({"pooling": "nonsense"}, "pooling"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            bertflow.st.export(tmp_path / "x", model=model_dir, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing left behind"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        bertflow.st.export(tmp_path / "full", model=model_dir)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def _st_python():
    """A Python with sentence-transformers and without bertflow, or None."""
    for exe in [os.environ.get("ST_PYTHON"), str(ROOT / ".venv-ref" / "bin" / "python")]:
        if exe and Path(exe).is_file():
            ok = subprocess.run(
                [exe, "-c", "import sentence_transformers, importlib.util, sys; "
                 "sys.exit(importlib.util.find_spec('bertflow') is not None)"],
                capture_output=True,
            )
            if ok.returncode == 0:
                return exe
    return None


ST_ENCODE = """
import sys, numpy as np
from sentence_transformers import SentenceTransformer
texts = open(sys.argv[2], encoding="utf-8").read().split("\\n")
# sentence-transformers >= 5 imports a module outside its own namespace only
# with trust_remote_code=True; a Dense-only export must load without it.
m = SentenceTransformer(sys.argv[1], device="cpu", trust_remote_code=sys.argv[4] == "trust")
np.save(sys.argv[3], m.encode(texts, batch_size=32, convert_to_numpy=True))
"""

# calibrate() on a plain sentence-transformers model, save, load, encode.
ST_CALIBRATE = """
import sys, numpy as np
import bertflow.st
from sentence_transformers import SentenceTransformer
texts = open(sys.argv[2], encoding="utf-8").read().split("\\n")
m = bertflow.st.calibrate(SentenceTransformer(sys.argv[1], device="cpu"), sys.argv[4])
z1 = m.encode(texts, batch_size=32, convert_to_numpy=True)
m.save(sys.argv[1] + "-saved")
z2 = SentenceTransformer(sys.argv[1] + "-saved", device="cpu", trust_remote_code=True).encode(
    texts, batch_size=32, convert_to_numpy=True)
assert np.array_equal(z1, z2), abs(z1 - z2).max()
np.save(sys.argv[3], z1)
"""


def _run_st(exe, script, *args, with_bertflow, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    if with_bertflow:
        # Only the bertflow package (not this venv's other packages) beside the
        # sentence-transformers environment's own.
        link = tmp_path / "pkgs"
        link.mkdir()
        (link / "bertflow").symlink_to(Path(bertflow.__file__).parent)
        env["PYTHONPATH"] = str(link)
    p = subprocess.run([exe, "-c", script, *map(str, args)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind,normalize", [("whiten", False), ("sn+natsv:k=5", True), ("none", False)])
def test_sentence_transformers_loads_it_without_bertflow(
    encoder, raw, stsb_sentences, model_dir, tmp_path, kind, normalize
):
    exe = _st_python()
    if exe is None:
        pytest.skip("no Python with sentence-transformers and without bertflow "
                    "(set ST_PYTHON, or create .venv-ref from scripts/reference/requirements.txt)")
    cal = bertflow.calibrator(kind).fit(raw, source=encoder)
    bertflow.st.export(tmp_path / "st", model=model_dir, calibrator=cal, normalize=normalize)
    (tmp_path / "texts.txt").write_text("\n".join(stsb_sentences), encoding="utf-8")
    _run_st(exe, ST_ENCODE, tmp_path / "st", tmp_path / "texts.txt", tmp_path / "z.npy", "plain",
            with_bertflow=False, tmp_path=tmp_path)
    got = np.load(tmp_path / "z.npy")
    want = cal.transform(raw)
    if normalize:
        want = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.slow
@pytest.mark.parametrize("pooling,kind", [("last-avg", "flow:levels=2,steps=8"),
                                          ("first-last-avg", "whiten"),
                                          ("layers:0,3,6", "softwhiten:blend=0.5")])
def test_bertflows_module_with_sentence_transformers(
    model_dir, stsb_sentences, tmp_path, pooling, kind
):
    exe = _st_python()
    if exe is None:
        pytest.skip("no Python with sentence-transformers (set ST_PYTHON, or create .venv-ref)")
    enc = bertflow.Encoder(model_dir, pooling=pooling, cache=False)
    x = enc.encode(stsb_sentences)
    cal = bertflow.calibrator(kind).fit(x, source=enc)
    info = bertflow.st.export(tmp_path / "st-bf", model=model_dir, pooling=pooling, calibrator=cal)
    assert info["needs_bertflow"]
    (tmp_path / "texts.txt").write_text("\n".join(stsb_sentences), encoding="utf-8")
    _run_st(exe, ST_ENCODE, tmp_path / "st-bf", tmp_path / "texts.txt", tmp_path / "z.npy", "trust",
            with_bertflow=True, tmp_path=tmp_path)
    want = cal.transform(x)
    got = np.load(tmp_path / "z.npy")
    # PyTorch's and bertflow's encoders differ by about 1e-6 per hidden state;
    # whitening a pooling that includes layer 1 magnifies that in its weakest
    # directions, hence 2e-5 of the largest value here (cosines stay >= 1 - 1e-5).
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * max(1.0, np.abs(want).max()))
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 1 - 1e-5


@pytest.mark.slow
def test_calibrate_appends_the_module_and_round_trips(encoder, raw, stsb_sentences, model_dir, tmp_path):
    exe = _st_python()
    if exe is None:
        pytest.skip("no Python with sentence-transformers (set ST_PYTHON, or create .venv-ref)")
    flow = bertflow.Flow(levels=2, steps=8).fit(raw, source=encoder)
    flow.save(tmp_path / "flow.safetensors")
    bertflow.st.export(tmp_path / "plain", model=model_dir)
    (tmp_path / "texts.txt").write_text("\n".join(stsb_sentences), encoding="utf-8")
    _run_st(exe, ST_CALIBRATE, tmp_path / "plain", tmp_path / "texts.txt", tmp_path / "z.npy",
            tmp_path / "flow.safetensors", with_bertflow=True, tmp_path=tmp_path)
    want = flow.transform(raw)
    np.testing.assert_allclose(np.load(tmp_path / "z.npy"), want, rtol=0,
                               atol=1e-5 * max(1.0, np.abs(want).max()))
