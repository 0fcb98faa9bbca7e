"""A tiny random ModernBERT with transformers' hidden states, for bertflow's tests.

    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_modernbert.py \
        crates/encoder/tests/fixtures/tiny-modernbert

Writes config.json, tokenizer.json (a byte-level BPE trained on a few sentences,
with ModernBERT's `[CLS] $A [SEP]` post-processor), model.safetensors (a
ModernBertModel: names without prefix) and golden.json.

The model has 3 layers, global attention every 2 (layers 0 and 2 global, theta
160000; layer 1 local, theta 10000) and a local window of 4 (keys within 2 of the
query), so the 8-30 token test sentences exercise both layer kinds and the
window. Biases everywhere are off except where ModernBERT allows them
(`norm_bias`, `attention_bias`, `mlp_bias` false as in the released models),
and the norms' weights are random so a missing norm shows.

golden.json: `max_len` (the model's position limit, 64), `cases` (text, ids after
truncation to max_len, `truncated`), and for the whole batch run at once
(padded to the longest, attn_implementation="eager"):
- `poolings`: name -> one vector per case, from transformers' hidden states
  (`output_hidden_states=True`, where hidden_states[0] is the embedding output
  and hidden_states[-1] is `last_hidden_state`, the final norm included):
  cls, last-avg, first-last-avg, emb-avg, layers:1,2, with masked means over
  the real tokens;
- `states`: for the cases with `"states": true`, every hidden state's token rows
  (real tokens only), `[layer][token][hidden]`.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import ModernBertConfig, ModernBertModel

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

SPECIAL = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
corpus = [
    "The man is playing a guitar on the street.",
    "A woman is slicing an onion in the kitchen.",
    "The cat sleeps on the mat while the dog runs in the park.",
    "Two children are playing football near the old bridge.",
    "A man rides a horse along the beach at sunset.",
    "Stocks fell sharply after the central bank raised rates.",
]
tok = Tokenizer(models.BPE(unk_token="[UNK]"))
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=330,
    special_tokens=SPECIAL,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tok.train_from_iterator(corpus, trainer)
cls_id, sep_id, pad_id = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
tok.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]",
    pair="[CLS] $A [SEP] $B [SEP]",
    special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
)
tok.save(os.path.join(out, "tokenizer.json"))

MAX_LEN = 64
torch.manual_seed(0)
cfg = ModernBertConfig(
    vocab_size=tok.get_vocab_size(),
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    hidden_activation="gelu",
    max_position_embeddings=MAX_LEN,
    global_attn_every_n_layers=2,
    global_rope_theta=160000.0,
    local_rope_theta=10000.0,
    local_attention=4,
    norm_eps=1e-5,
    norm_bias=False,
    attention_bias=False,
    mlp_bias=False,
    pad_token_id=pad_id,
    cls_token_id=cls_id,
    sep_token_id=sep_id,
    bos_token_id=cls_id,
    eos_token_id=sep_id,
    initializer_range=0.2,
    attn_implementation="eager",
)
model = ModernBertModel(cfg).eval()
assert model.config._attn_implementation == "eager", model.config._attn_implementation
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.3 * torch.randn_like(p))
assert [type(l.attn_norm).__name__ for l in model.layers] == ["Identity", "LayerNorm", "LayerNorm"]
assert cfg.layer_types == ["full_attention", "sliding_attention", "full_attention"], cfg.layer_types
cfg.save_pretrained(out)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, "model.safetensors"))

sentences = [
    "The man is playing a guitar.",
    "A cat sleeps on the mat!",
    "Two children are slicing onions near the old bridge at sunset.",
    "Stocks fell sharply.",
    # longer than the 64 positions: truncated, [SEP] kept
    " ".join(corpus) + " " + " ".join(corpus),
]
cases, batch = [], []
for s in sentences:
    ids = tok.encode(s).ids
    truncated = len(ids) > MAX_LEN
    if truncated:
        ids = ids[: MAX_LEN - 1] + [sep_id]
    cases.append({"text": s, "ids": ids, "truncated": truncated, "states": not truncated and len(ids) <= 20})
    batch.append(ids)
lens = [len(i) for i in batch]
assert min(lens) >= 6 and max(lens) == MAX_LEN and sorted(lens)[-2] > 8, lens
t = max(lens)
input_ids = torch.tensor([i + [pad_id] * (t - len(i)) for i in batch])
mask = torch.tensor([[1] * l + [0] * (t - l) for l in lens])
with torch.no_grad():
    o = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
hs = o.hidden_states
assert len(hs) == cfg.num_hidden_layers + 1
assert torch.equal(hs[-1], o.last_hidden_state), "hidden_states[-1] is last_hidden_state (final norm in)"


def mean(layers, r):
    v = sum(hs[l][r, : lens[r]] for l in layers) / len(layers)
    return v.mean(0)


def f32(v):
    return [float(f"{x:.9g}") for x in v.tolist()]


n = cfg.num_hidden_layers
poolings = {
    "cls": [f32(hs[n][r, 0]) for r in range(len(batch))],
    "last-avg": [f32(mean([n], r)) for r in range(len(batch))],
    "first-last-avg": [f32(mean([1, n], r)) for r in range(len(batch))],
    "emb-avg": [f32(mean([0], r)) for r in range(len(batch))],
    "layers:1,2": [f32(mean([1, 2], r)) for r in range(len(batch))],
}
for r, c in enumerate(cases):
    if c["states"]:
        c["hidden_states"] = [[f32(hs[l][r, i]) for i in range(lens[r])] for l in range(n + 1)]
json.dump({"max_len": MAX_LEN, "cases": cases, "poolings": poolings}, open(os.path.join(out, "golden.json"), "w"))
print("lengths", lens, "vocab", tok.get_vocab_size())
