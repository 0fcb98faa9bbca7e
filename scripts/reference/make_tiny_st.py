"""Tiny sentence-transformers directories for `--pooling st`, with golden vectors.

Writes crates/encoder/tests/fixtures/tiny-st/{mean-dense,cls-multi,legacy}/: one
tiny random BERT (hidden 16, 2 layers, 36-word vocabulary; about 25 KB) under
three sentence-transformers pipelines, each with `golden.json`: the vectors
`SentenceTransformer(dir).encode(TEXTS)` returns (sentence-transformers 6,
transformers 5, CPU, float32).

- mean-dense: Transformer in the root (max_seq_length 12, which
  sentence-transformers 6 stores as tokenizer_config.json's model_max_length:
  the long sentences are cut), Pooling ("mean", "max", "mean_sqrt_len_tokens"; new config format),
  Dense 48->20 tanh (safetensors), Dense 20->8 identity without bias, Normalize.
- cls-multi: Transformer in "0_Transformer", Pooling ("cls", "weightedmean",
  "lasttoken"), Dense 48->6 tanh from pytorch_model.bin (the config names no
  activation: sentence-transformers' default, tanh).
- legacy: a cased tokenizer with the old sentence_bert_config.json
  (`max_seq_length: 10`, `do_lower_case: true`: the texts are lowercased
  before tokenising),
  Pooling in the old `pooling_mode_*` format with mean and max set (concatenated
  in sentence-transformers' order), no Dense, Normalize.

Run in the reference environment: /work/main/.venv-ref/bin/python scripts/reference/make_tiny_st.py
"""

import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from transformers import BertConfig, BertModel, BertTokenizerFast

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "encoder", "tests", "fixtures", "tiny-st")

WORDS = (
    "a man plays guitar the dog runs in park is playing music someone . , cat sleeps on mat "
    "##s ##ing play run sun big red car and with"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS

TEXTS = [
    "a man plays guitar.",
    "A Man Plays The Guitar.",
    "the dog runs in the park",
    "someone is playing music",
    "cat",
    "a big red car and a big red dog and a cat sleeps on the mat in the sun",
    "the cat sleeps on the mat, the dog runs.",
    "zebra",
]


def tiny_bert(tmp, lowercase):
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    model = BertModel(cfg, add_pooling_layer=False)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.4)
    with open(os.path.join(tmp, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    tok = BertTokenizerFast(vocab_file=os.path.join(tmp, "vocab.txt"), do_lower_case=lowercase)
    out = os.path.join(tmp, "bert")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def dense(din, dout, act, bias, seed):
    d = Dense(din, dout, bias=bias, activation_function=act)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        d.linear.weight.copy_(torch.randn(dout, din, generator=g) * (1.5 / din**0.5))
        if bias:
            d.linear.bias.copy_(torch.randn(dout, generator=g) * 0.3)
    return d


def golden(dirname):
    m = SentenceTransformer(dirname, device="cpu")
    v = m.encode(TEXTS, batch_size=4, convert_to_numpy=True)
    assert v.dtype == np.float32 and np.isfinite(v).all()
    with open(os.path.join(dirname, "golden.json"), "w") as f:
        json.dump({"texts": TEXTS, "vectors": v.astype(float).tolist()}, f)
    print(dirname, v.shape, file=sys.stderr)


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        uncased = tiny_bert(tmp, lowercase=True)

        # mean-dense
        out = os.path.join(ROOT, "mean-dense")
        t = Transformer(uncased, max_seq_length=12)
        p = Pooling(16, pooling_mode=("mean", "max", "mean_sqrt_len_tokens"))
        d1 = dense(48, 20, torch.nn.Tanh(), True, 1)
        d2 = dense(20, 8, torch.nn.Identity(), False, 2)
        SentenceTransformer(modules=[t, p, d1, d2, Normalize()], device="cpu").save(out)
        golden(out)

        # cls-multi: the transformer in a sub-folder, Dense weights as pytorch_model.bin
        out = os.path.join(ROOT, "cls-multi")
        t = Transformer(uncased, max_seq_length=32)
        p = Pooling(16, pooling_mode=("cls", "weightedmean", "lasttoken"))
        d1 = dense(48, 6, torch.nn.Tanh(), True, 3)
        SentenceTransformer(modules=[t, p, d1], device="cpu").save(out, safe_serialization=False)
        mods_path = os.path.join(out, "modules.json")
        with open(mods_path) as f:
            mods = json.load(f)
        sub = os.path.join(out, "0_Transformer")
        os.makedirs(sub)
        for name in os.listdir(out):
            full = os.path.join(out, name)
            if os.path.isfile(full) and name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
                shutil.move(full, os.path.join(sub, name))
        mods[0]["path"] = "0_Transformer"
        with open(mods_path, "w") as f:
            json.dump(mods, f, indent=2)
        dense_dir = [m["path"] for m in mods if m["type"].endswith("Dense")][0]
        with open(os.path.join(out, dense_dir, "config.json")) as f:
            cfg = json.load(f)
        del cfg["activation_function"]  # sentence-transformers' default: tanh
        with open(os.path.join(out, dense_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        golden(out)

        # legacy: cased tokenizer, do_lower_case, the old pooling_mode_* keys
        cased_tmp = os.path.join(tmp, "cased")
        os.makedirs(cased_tmp)
        cased = tiny_bert(cased_tmp, lowercase=False)
        out = os.path.join(ROOT, "legacy")
        t = Transformer(cased, max_seq_length=32, do_lower_case=True)
        p = Pooling(16, pooling_mode=("mean", "max"))
        SentenceTransformer(modules=[t, p, Normalize()], device="cpu").save(out)
        mods = json.load(open(os.path.join(out, "modules.json")))
        pool_dir = [m["path"] for m in mods if m["type"].endswith("Pooling")][0]
        legacy = {
            "word_embedding_dimension": 16,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": True,
            "pooling_mode_mean_sqrt_len_tokens": False,
        }
        with open(os.path.join(out, pool_dir, "config.json"), "w") as f:
            json.dump(legacy, f, indent=2)
        # The old sentence_bert_config.json (as all-MiniLM-L6-v2 has it): truncation
        # and lowercasing there, and the saved tokenizer without the Lowercase
        # normaliser sentence-transformers 6 baked into it (it adds it back on load).
        with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": 10, "do_lower_case": True}, f, indent=2)
        tok_path = os.path.join(out, "tokenizer.json")
        with open(tok_path) as f:
            tok = json.load(f)
        norms = tok["normalizer"]["normalizers"]
        assert norms[0] == {"type": "Lowercase"}, norms
        tok["normalizer"] = norms[1]
        with open(tok_path, "w") as f:
            json.dump(tok, f)
        golden(out)
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            if name in ("README.md",):
                os.remove(os.path.join(dirpath, name))


if __name__ == "__main__":
    main()
