"""A tiny random BERT in the old PyTorch layout, for bertflow's loader tests.

    python scripts/reference/make_tiny_bert.py crates/encoder/tests/fixtures/tiny-bert

Writes config.json, vocab.txt (no tokenizer.json), pytorch_model.bin from a
BertForPreTraining (keys prefixed "bert.", LayerNorm parameters renamed to the
TF-era gamma/beta), and golden.json with PyTorch's vectors for a few poolings.
"""
import json
import os
import sys

import torch
from transformers import BertConfig, BertForPreTraining, BertTokenizer

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
words = "the a man woman is playing guitar cat dog sleeps on mat runs park slicing onion ##s ##ing ##ed".split()
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(".,!?") + words
open(os.path.join(out, "vocab.txt"), "w").write("\n".join(vocab) + "\n")
torch.manual_seed(0)
cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
model = BertForPreTraining(cfg).eval()
cfg.to_json_file(os.path.join(out, "config.json"))
sd = {}
for k, v in model.state_dict().items():
    if "LayerNorm" in k:
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    sd[k] = v.clone()
torch.save(sd, os.path.join(out, "pytorch_model.bin"))
tok = BertTokenizer(os.path.join(out, "vocab.txt"), do_lower_case=True)
sentences = ["The man is playing guitar.", "A cat sleeps on the mat!", "Dogs runs in park, slicing onions?"]
golden = []
for s in sentences:
    enc = tok(s, return_tensors="pt")
    with torch.no_grad():
        o = model.bert(**enc, output_hidden_states=True)
    hs = o.hidden_states
    golden.append({
        "text": s,
        "ids": enc["input_ids"][0].tolist(),
        "cls": hs[2][0, 0].tolist(),
        "pooler": o.pooler_output[0].tolist(),
        "first-last-avg": ((hs[1][0] + hs[2][0]) / 2).mean(0).tolist(),
        "emb-avg": hs[0][0].mean(0).tolist(),
    })
json.dump(golden, open(os.path.join(out, "golden.json"), "w"))
