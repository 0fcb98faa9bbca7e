"""Tiny random SPLADE (masked-LM) checkpoints and a tiny BGE-M3-shaped
checkpoint, with reference outputs, for the sparse and multi-vector golden
tests (no PyTorch in CI).

    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_sparse.py crates/encoder/tests/fixtures

Writes

- tiny-<name>-splade/ for bert, distilbert, roberta and xlm-roberta: a
  `*ForMaskedLM` checkpoint saved by transformers' `save_pretrained` (the
  decoder tied to the word embeddings, so not written, except for xlm-roberta,
  built with `tie_word_embeddings=False`: its decoder is its own tensor),
  tokenizer.json, and golden.json: per text (one right-padded batch, one text
  cut at the limit) the ids and the SPLADE vector `max_t log(1 + relu(logits))`
  over the real tokens as sorted indices and values, the same with
  `max_active_dims` = 3, and the top-3 tokens as `SparseEncoder.decode` names
  them. For bert the directory is also a sentence-transformers SparseEncoder
  (MLMTransformer + SpladePooling, saved by `SparseEncoder.save`) and the golden
  vectors are checked against `SparseEncoder.encode` here (1e-6).
- tiny-bge-m3/: an XLM-RoBERTa model with `colbert_linear.pt` ([h, h] + bias)
  and `sparse_linear.pt` ([1, h] + bias) as FlagEmbedding's BGEM3 saves them,
  and golden.json with, per text, BGEM3's published outputs recomputed in
  NumPy from the model's last hidden state: dense = normalize(h[CLS]); sparse =
  relu(sparse_linear(h)) per token, max per token id, the cls/eos/pad/unk ids and
  zero weights dropped; colbert = normalize(colbert_linear(h[1:len])) (the first
  token dropped, padding dropped); and the multi-vector output of a model
  without a projection (normalize(h) per real token, optionally without the
  first) and ColBERT's query padding with the mask token to 12 tokens.

Hidden 32, 2 layers, weights drawn wide (std 0.2, LayerNorm around 1).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertTokenizer,
    DistilBertForMaskedLM,
    RobertaForMaskedLM,
    XLMRobertaForMaskedLM,
    XLMRobertaModel,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import HEADS, HIDDEN, INTER, LAYERS, POSITIONS, SENTENCES, build, randomize, wordpiece_vocab  # noqa: E402

CLASSES = {"distilbert": DistilBertForMaskedLM, "roberta": RobertaForMaskedLM, "xlm-roberta": XLMRobertaForMaskedLM}
TOP = 3
QUERY_LEN = 12


def r9(v):
    return [float(f"{x:.9g}") for x in v]


def sparse_of(row):
    idx = np.nonzero(row)[0]
    return {"indices": idx.tolist(), "values": r9(row[idx].tolist())}


def top_k(row, k):
    out = np.zeros_like(row)
    keep = np.argsort(-np.abs(row), kind="stable")[:k]
    out[keep] = row[keep]
    return out


def bert_family():
    vocab = wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    path = "/tmp/tiny-bert-splade-vocab.txt"
    with open(path, "w") as f:
        f.write("".join(t + "\n" for t in sorted(vocab, key=vocab.get)))
    tok = BertTokenizer(path, do_lower_case=True)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=INTER,
                     max_position_embeddings=POSITIONS, type_vocab_size=2, layer_norm_eps=1e-5)
    return cfg, BertForMaskedLM, tok


def make_splade(name, root, seed):
    out = os.path.join(root, f"tiny-{name}-splade")
    os.makedirs(out, exist_ok=True)
    if name == "bert":
        cfg, cls, tok = bert_family()
    else:
        cfg, _, tok, _, _ = build(name)
        cfg.vocab_size = len(tok)
        cls = CLASSES[name]
    if name == "xlm-roberta":
        cfg.tie_word_embeddings = False
    torch.manual_seed(seed)
    model = randomize(cls(cfg), seed)
    model.config.architectures = [cls.__name__]
    limit = POSITIONS - (cfg.pad_token_id + 1 if name in ("roberta", "xlm-roberta") else 0)
    if name == "bert":
        from sentence_transformers import SparseEncoder
        from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling

        tmp = out + "-hf"
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        st = SparseEncoder(modules=[MLMTransformer(tmp, max_seq_length=limit), SpladePooling("max")])
        st.save(out)
        os.remove(os.path.join(out, "README.md"))
        for f in os.listdir(tmp):
            os.remove(os.path.join(tmp, f))
        os.rmdir(tmp)
    else:
        model.save_pretrained(out)
    tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=limit, return_tensors="pt")
    full = [len(tok(s)["input_ids"]) for s in SENTENCES]
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    mask = enc["attention_mask"].unsqueeze(-1).float()
    vecs = torch.log1p(torch.relu(logits * mask)).max(dim=1).values.numpy().astype(np.float64)
    if name == "bert":
        got = st.encode(SENTENCES, convert_to_tensor=True).to_dense().numpy()
        assert np.abs(got - vecs).max() < 1e-6, np.abs(got - vecs).max()
        got_k = st.encode(SENTENCES, convert_to_tensor=True, max_active_dims=TOP).to_dense().numpy()
        decoded = st.decode(st.encode(SENTENCES, convert_to_tensor=True), top_k=TOP)
    cases = []
    for i, s in enumerate(SENTENCES):
        n = int(enc["attention_mask"][i].sum())
        row = vecs[i]
        k = top_k(row, TOP)
        order = np.argsort(-row, kind="stable")[:TOP]
        decode = [[tok.convert_ids_to_tokens(int(j)), float(f"{row[j]:.9g}")] for j in order if row[j] > 0]
        if name == "bert":
            assert np.abs(got_k[i] - k).max() < 1e-6
            assert [t for t, _ in decoded[i]] == [t for t, _ in decode], (decoded[i], decode)
        cases.append({"text": s, "ids": enc["input_ids"][i, :n].tolist(), "truncated": full[i] > limit,
                      "sparse": sparse_of(row), "top3": sparse_of(k), "decode3": decode})
    golden = {"class": cls.__name__, "max_tokens": limit, "vocab_size": cfg.vocab_size,
              "tied": bool(cfg.tie_word_embeddings), "cases": cases}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print(name, "vocab", cfg.vocab_size, "limit", limit, "nnz", [len(c["sparse"]["indices"]) for c in cases], sizes)


def normalize(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def make_bge_m3(root, seed):
    out = os.path.join(root, "tiny-bge-m3")
    os.makedirs(out, exist_ok=True)
    cfg, _, tok, _, _ = build("xlm-roberta")
    cfg.vocab_size = len(tok)
    cfg.architectures = ["XLMRobertaModel"]
    torch.manual_seed(seed)
    model = randomize(XLMRobertaModel(cfg, add_pooling_layer=False), seed)
    model.save_pretrained(out)
    tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
    g = torch.Generator().manual_seed(seed + 100)
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    with torch.no_grad():
        for lin in (colbert, sparse):
            for p in lin.parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
        sparse.bias.fill_(0.05)
    torch.save(colbert.state_dict(), os.path.join(out, "colbert_linear.pt"))
    torch.save(sparse.state_dict(), os.path.join(out, "sparse_linear.pt"))
    limit = POSITIONS - (cfg.pad_token_id + 1)
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=limit, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state.numpy()
    h = h.astype(np.float64)
    wc, bc = colbert.weight.detach().numpy().astype(np.float64), colbert.bias.detach().numpy().astype(np.float64)
    ws, bs = sparse.weight.detach().numpy().astype(np.float64), sparse.bias.detach().numpy().astype(np.float64)
    unused = {tok.convert_tokens_to_ids(t) for t in (tok.cls_token, tok.eos_token, tok.pad_token, tok.unk_token)}
    cases = []
    for i, s in enumerate(SENTENCES):
        n = int(enc["attention_mask"][i].sum())
        ids = enc["input_ids"][i, :n].tolist()
        hi = h[i, :n]
        dense = normalize(hi[0])
        weights = np.maximum(hi @ ws.T + bs, 0.0)[:, 0]
        best = {}
        for w, t in zip(weights, ids):
            if t not in unused and w > 0 and w > best.get(t, 0.0):
                best[t] = w
        idx = sorted(best)
        colbert_vecs = normalize(hi[1:] @ wc.T + bc)
        cases.append({
            "text": s, "ids": ids, "dense": r9(dense.tolist()),
            "sparse": {"indices": idx, "values": r9([best[t] for t in idx])},
            "colbert": [r9(v) for v in colbert_vecs.tolist()],
            # Without a projection: every real token's hidden state, normalised.
            "plain": [r9(v) for v in normalize(hi).tolist()],
        })
    # ColBERT query padding: the query's ids padded with the mask token to
    # QUERY_LEN, attended to (PyLate's / ColBERT's query augmentation).
    q = SENTENCES[1]
    qids = tok(q)["input_ids"]
    padded = qids + [tok.mask_token_id] * (QUERY_LEN - len(qids))
    with torch.no_grad():
        hq = model(input_ids=torch.tensor([padded]), attention_mask=torch.ones(1, QUERY_LEN, dtype=torch.long)
                   ).last_hidden_state.numpy()[0].astype(np.float64)
    query = {"text": q, "ids": padded, "length": QUERY_LEN, "colbert": [r9(v) for v in normalize(hq[1:] @ wc.T + bc).tolist()]}
    golden = {"max_tokens": limit, "vocab_size": cfg.vocab_size, "unused": sorted(unused), "cases": cases,
              "query": query}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print("bge-m3 vocab", cfg.vocab_size, "limit", limit, sizes)


if __name__ == "__main__":
    root = sys.argv[1]
    for seed, name in enumerate(["bert", "distilbert", "roberta", "xlm-roberta"]):
        make_splade(name, root, seed + 31)
    make_bge_m3(root, 41)
