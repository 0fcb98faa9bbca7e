"""Tiny random checkpoints of the rotary and disentangled BERT-likes bertflow
runs (gte, nomic_bert, jina_embeddings_v3, deberta-v2), with transformers'
vectors, for the encoder's golden tests (no PyTorch in CI); and a tiny
DebertaV2ForSequenceClassification (mxbai-rerank's class) with its logits.

    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_bertlikes.py crates/encoder/tests/fixtures

Writes tiny-<name>/ for gte, nomic, jina-v3 and deberta (the native
transformers 5 models, `GteModel`, `NomicBertModel`, `JinaEmbeddingsV3Model`,
`DebertaV2Model`, names as transformers saves them, f32): config.json,
tokenizer.json (SentencePiece-style Unigram as XLM-R for gte and jina-v3,
WordPiece for nomic and deberta), model.safetensors and golden.json in the
layout of make_tiny_models.py: for every sentence of one right-padded batch
(one cut at the model's token limit) its ids and the vectors of several
poolings from transformers' hidden states (output_hidden_states=True: 0 is the
embedding output, 1..N the layers; masked means over the real tokens). For
DeBERTa also the log-bucketed relative positions of -300..300.

And tiny-deberta-cls/ in the layout of make_tiny_rerankers.py (ids, token
types and logits of texts and pairs, cut by longest_first truncation).

Hidden 32, 2 layers, 4 heads, intermediate 37, 40 positions (the token limit;
rotary families have no position table), weights drawn wider than
transformers' init (std 0.2, norms around 1) so that every layer moves the
vectors. DeBERTa: position_buckets 8 and max_relative_positions 16 so that
the test sentences reach the logarithmic buckets, both c2p and p2c, shared
attention keys, a LayerNorm on the relative embeddings (DeBERTa-v3's
settings), no absolute positions and no token types.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (
    BertTokenizer,
    DebertaV2Config,
    DebertaV2ForSequenceClassification,
    DebertaV2Model,
    GteConfig,
    GteModel,
    JinaEmbeddingsV3Config,
    JinaEmbeddingsV3Model,
    NomicBertConfig,
    NomicBertModel,
)
from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import HEADS, HIDDEN, INTER, LAYERS, POSITIONS, SENTENCES, build, wordpiece_vocab  # noqa: E402
from make_tiny_rerankers import INPUTS  # noqa: E402

BUCKETS, MAX_REL = 8, 16


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def wordpiece():
    vocab = wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    path = "/tmp/tiny-bertlikes-vocab.txt"
    with open(path, "w") as f:
        f.write("".join(t + "\n" for t in sorted(vocab, key=vocab.get)))
    return BertTokenizer(path, do_lower_case=True)


def build_bertlike(name):
    """(config, model class, tokenizer, prefix, token limit)"""
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=INTER, max_position_embeddings=POSITIONS, layer_norm_eps=1e-5)
    if name == "gte":
        _, _, tok, _, _ = build("xlm-roberta")
        cfg = GteConfig(vocab_size=len(tok), **common, type_vocab_size=1, pad_token_id=1,
                        hidden_act="gelu", rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
        return cfg, GteModel, tok, "", POSITIONS
    if name == "nomic":
        tok = wordpiece()
        cfg = NomicBertConfig(vocab_size=len(tok), **common, type_vocab_size=2, pad_token_id=0,
                              hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
        return cfg, NomicBertModel, tok, "", POSITIONS
    if name == "jina-v3":
        _, _, tok, _, _ = build("xlm-roberta")
        cfg = JinaEmbeddingsV3Config(vocab_size=len(tok), **common, type_vocab_size=1, pad_token_id=1,
                                     bos_token_id=0, eos_token_id=2, hidden_act="gelu",
                                     rope_parameters={"rope_type": "default", "rope_theta": 2000.0})
        return cfg, JinaEmbeddingsV3Model, tok, "", POSITIONS
    if name in ("deberta", "deberta-cls"):
        tok = wordpiece()
        cfg = DebertaV2Config(vocab_size=len(tok), **common, type_vocab_size=0, pad_token_id=0,
                              hidden_act="gelu", relative_attention=True, position_buckets=BUCKETS,
                              max_relative_positions=MAX_REL, norm_rel_ebd="layer_norm", share_att_key=True,
                              pos_att_type=["p2c", "c2p"], position_biased_input=False)
        return cfg, DebertaV2Model, tok, "", POSITIONS
    raise ValueError(name)


def r7(v):
    return [float(f"{x:.8g}") for x in v]


def save(out, cfg, tok, model, prefix):
    os.makedirs(out, exist_ok=True)
    cfg.save_pretrained(out)
    tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
    sd = {prefix + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"))


def make(name, root, seed):
    out = os.path.join(root, f"tiny-{name}")
    cfg, cls, tok, prefix, limit = build_bertlike(name)
    torch.manual_seed(seed)
    model = randomize(cls(cfg), seed)
    save(out, cfg, tok, model, prefix)
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=limit, return_tensors="pt")
    full = [len(tok(s)["input_ids"]) for s in SENTENCES]
    with torch.no_grad():
        o = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
    hs = o.hidden_states
    assert len(hs) == LAYERS + 1, len(hs)
    assert torch.equal(hs[-1], o.last_hidden_state)
    mask = enc["attention_mask"].unsqueeze(-1).float()

    def mean(h):
        return (h * mask).sum(1) / mask.sum(1)

    pools = {
        "cls": hs[-1][:, 0],
        "last-avg": mean(hs[-1]),
        "first-last-avg": mean((hs[1] + hs[-1]) / 2),
        "emb-avg": mean(hs[0]),
        "layers:1": mean(hs[1]),
    }
    if getattr(o, "pooler_output", None) is not None:
        pools["pooler"] = o.pooler_output
    cases = []
    for i, s in enumerate(SENTENCES):
        n = int(enc["attention_mask"][i].sum())
        case = {"text": s, "ids": enc["input_ids"][i, :n].tolist(), "truncated": full[i] > limit}
        case.update({k: r7(v[i].tolist()) for k, v in pools.items()})
        cases.append(case)
    assert any(c["truncated"] for c in cases)
    golden = {"model_type": cfg.model_type, "max_tokens": limit, "poolings": list(pools), "cases": cases}
    if name == "deberta":
        x = torch.zeros(1, 301, 1)
        rel = build_relative_position(x, x, bucket_size=BUCKETS, max_position=MAX_REL)[0]
        # rel[i, j] is the bucket of i - j: row 300 holds 300 - j for j in 0..=300,
        # column 0 holds i for i in 0..=300.
        golden["buckets_from"] = -300
        golden["buckets"] = rel[0].flip(0).tolist() + rel[1:, 0].tolist()
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print(name, "vocab", len(tok), "limit", limit, "lens", full, sizes)


def r9(v):
    return [float(f"{x:.9g}") for x in v]


def make_cls(root, seed):
    """tiny-deberta-cls: DebertaV2ForSequenceClassification, one label."""
    out = os.path.join(root, "tiny-deberta-cls")
    cfg, _, tok, _, limit = build_bertlike("deberta-cls")
    cfg.num_labels = 1
    cfg.pooler_hidden_act = "gelu"
    torch.manual_seed(seed)
    model = randomize(DebertaV2ForSequenceClassification(cfg), seed)
    model.config.architectures = ["DebertaV2ForSequenceClassification"]
    save(out, model.config, tok, model, "")
    cases = []
    for text, pair in INPUTS:
        enc = tok(text, pair, truncation=True, max_length=limit, return_tensors="pt")
        full = len(tok(text, pair)["input_ids"])
        with torch.no_grad():
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0]
        case = {"text": text, "pair": pair, "ids": enc["input_ids"][0].tolist(),
                "types": [0] * enc["input_ids"].shape[1], "truncated": full > limit,
                "logits": r9(logits.tolist())}
        if full > limit:
            tok.truncation_side = "left"
            enc = tok(text, pair, truncation=True, max_length=limit, return_tensors="pt")
            tok.truncation_side = "right"
            with torch.no_grad():
                logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0]
            case["left"] = {"ids": enc["input_ids"][0].tolist(), "types": [0] * enc["input_ids"].shape[1],
                            "logits": r9(logits.tolist())}
        cases.append(case)
    golden = {"class": "DebertaV2ForSequenceClassification", "max_len": limit,
              "labels": [cfg.id2label[i] for i in range(cfg.num_labels)], "cases": cases}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print("deberta-cls limit", limit, "lens", [len(c["ids"]) for c in cases], sizes)


if __name__ == "__main__":
    root = sys.argv[1]
    names = sys.argv[2:] or ["gte", "nomic", "deberta", "jina-v3", "deberta-cls"]
    for seed, name in enumerate(["gte", "nomic", "deberta", "jina-v3"]):
        if name in names:
            make(name, root, seed + 31)
    if "deberta-cls" in names:
        make_cls(root, 41)
