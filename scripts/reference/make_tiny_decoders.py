"""Tiny random decoder-style checkpoints (Qwen3, Qwen2, EmbeddingGemma-like
Gemma 3, EuroBERT) with transformers' hidden states, and two
sentence-transformers directories over them, for bertflow's tests.

    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_decoders.py crates/encoder/tests/fixtures

Writes tiny-<name>/ for qwen3, qwen2, gemma3 and eurobert: config.json (as
transformers 5 saves it), tokenizer.json (a byte-level BPE trained on a few
sentences with the family's special tokens: Qwen appends <|endoftext|>, which
is also its padding token; Gemma wraps in <bos> ... <eos>; EuroBERT in
<|begin_of_text|> ... <|end_of_text|>), model.safetensors (the base model's
names, Qwen2 and EuroBERT under the `model.` prefix of their *ForCausalLM /
*ForMaskedLM) and golden.json.

Sizes: hidden 32, 4 query heads, 3 layers, intermediate 48, 64 positions.
Qwen3: 2 key/value heads (grouped-query attention) of head_dim 16 (not
hidden / heads), query/key norms, causal. Qwen2: 4 key/value heads (no
grouping), q/k/v biases, causal. Gemma 3: use_bidirectional_attention,
layers sliding / global / sliding with sliding_window 6 (keys within 3 of the
query), 2 key/value heads, head_dim 8, query_pre_attn_scalar 12, (1 + w)
norms drawn around 0. EuroBERT: 2 key/value heads, attention and MLP biases,
bidirectional. Weights are drawn with std 0.2 (norm weights around 1, Gemma's
around 0) so that every layer moves the vectors.

golden.json: `model_type`, `max_len` (64), `cases` (text, ids after
truncation, `truncated`, and `hidden_states`: every hidden state's token rows
of the real tokens, `[state][token][hidden]`, from one right-padded batch run
with `output_hidden_states=True`, whose last entry is `last_hidden_state`,
after the final norm), and `poolings`: name -> one vector per case:
`last-token` from the right-padded batch and `last-token-left` from a
left-padded one (the same vectors: bertflow pads on the right), `last-avg`,
`first-last-avg`, `emb-avg`, `cls` (masked means over the real tokens).

Also tiny-st-decoders/gemma-dense (the tiny Gemma under Pooling mean, Dense
32->48 and Dense 48->16 without bias or activation, Normalize, as
EmbeddingGemma) and tiny-st-decoders/qwen-lasttoken (the tiny Qwen3 under
Pooling lasttoken and Normalize, left padding, as Qwen3-Embedding), each with
the vectors `SentenceTransformer(dir).encode(texts)` gives.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    EuroBertConfig,
    EuroBertModel,
    Gemma3TextConfig,
    Gemma3TextModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2Model,
    Qwen3Config,
    Qwen3Model,
)

CORPUS = [
    "The man is playing a guitar on the street.",
    "A woman is slicing an onion in the kitchen.",
    "The cat sleeps on the mat while the dog runs in the park.",
    "Two children are playing football near the old bridge.",
    "A man rides a horse along the beach at sunset.",
    "Stocks fell sharply after the central bank raised rates.",
]
SENTENCES = [
    "The man is playing a guitar.",
    "A cat sleeps!",
    "Two children are slicing onions near the old bridge at sunset.",
    "Stocks fell.",
    # longer than the 64 positions: cut, the closing token kept
    " ".join(CORPUS) + " " + " ".join(CORPUS),
]
MAX_LEN = 64
HIDDEN, HEADS, LAYERS, INTER = 32, 4, 3, 48

# family -> (specials, template prefix, template suffix, pad token)
TOKENS = {
    "qwen": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], [], ["<|endoftext|>"], "<|endoftext|>"),
    "gemma": (["<pad>", "<eos>", "<bos>", "<unk>"], ["<bos>"], ["<eos>"], "<pad>"),
    "eurobert": (["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"], ["<|begin_of_text|>"], ["<|end_of_text|>"],
                 "<|end_of_text|>"),
}


def tokenizer(family):
    specials, pre, post, pad = TOKENS[family]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=330, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    single = " ".join(pre + ["$A"] + post)
    pair = " ".join(pre + ["$A"] + post + ["$B:1"] + post)
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in sorted(set(pre + post))],
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, model_max_length=MAX_LEN)
    return tok, fast


def build(name):
    """(config, model class, family, prefix)"""
    if name == "qwen3":
        _, fast = tokenizer("qwen")
        cfg = Qwen3Config(
            vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=2, head_dim=16, max_position_embeddings=MAX_LEN,
            rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            eos_token_id=fast.pad_token_id, tie_word_embeddings=False,
        )
        return cfg, Qwen3Model, "qwen", ""
    if name == "qwen2":
        _, fast = tokenizer("qwen")
        cfg = Qwen2Config(
            vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=MAX_LEN,
            rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            eos_token_id=fast.pad_token_id,
        )
        return cfg, Qwen2Model, "qwen", "model."
    if name == "gemma3":
        _, fast = tokenizer("gemma")
        cfg = Gemma3TextConfig(
            vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=2, head_dim=8, max_position_embeddings=MAX_LEN,
            rms_norm_eps=1e-6, query_pre_attn_scalar=12, sliding_window=6, use_bidirectional_attention=True,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
            pad_token_id=fast.convert_tokens_to_ids("<pad>"), eos_token_id=fast.convert_tokens_to_ids("<eos>"),
            bos_token_id=fast.convert_tokens_to_ids("<bos>"),
        )
        return cfg, Gemma3TextModel, "gemma", ""
    if name == "eurobert":
        _, fast = tokenizer("eurobert")
        cfg = EuroBertConfig(
            vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=MAX_LEN,
            rms_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 250000.0},
            pad_token_id=fast.pad_token_id, bos_token_id=fast.convert_tokens_to_ids("<|begin_of_text|>"),
            eos_token_id=fast.pad_token_id, mask_token_id=fast.convert_tokens_to_ids("<|mask|>"),
        )
        return cfg, EuroBertModel, "eurobert", "model."
    raise ValueError(name)


def randomize(model, seed, plus_one):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                base = 0.0 if plus_one else 1.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def f32(v):
    return [float(f"{x:.8g}") for x in v.tolist()]


def run(model, fast, side):
    fast.padding_side = side
    enc = fast(SENTENCES, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
    with torch.no_grad():
        o = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
    assert torch.equal(o.hidden_states[-1], o.last_hidden_state), "hidden_states[-1] is last_hidden_state"
    return enc, o.hidden_states


def make(name, root, seed):
    out = os.path.join(root, f"tiny-{name}")
    os.makedirs(out, exist_ok=True)
    cfg, cls, family, prefix = build(name)
    tok, fast = tokenizer(family)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = randomize(cls(cfg), seed, plus_one=name == "gemma3")
    cfg.save_pretrained(out)
    tok.save(os.path.join(out, "tokenizer.json"))
    sd = {prefix + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"))

    enc, hs = run(model, fast, "right")
    enc_l, hs_l = run(model, fast, "left")
    lens = enc["attention_mask"].sum(1).tolist()
    t = enc["input_ids"].shape[1]
    full = [len(fast(s)["input_ids"]) for s in SENTENCES]
    n = cfg.num_hidden_layers

    def mean(layers, r):
        return (sum(hs[l][r, : lens[r]] for l in layers) / len(layers)).mean(0)

    pools = {
        "last-token": [hs[n][r, lens[r] - 1] for r in range(len(lens))],
        "last-token-left": [hs_l[n][r, t - 1] for r in range(len(lens))],
        "last-avg": [mean([n], r) for r in range(len(lens))],
        "first-last-avg": [mean([1, n], r) for r in range(len(lens))],
        "emb-avg": [mean([0], r) for r in range(len(lens))],
        "cls": [hs[n][r, 0] for r in range(len(lens))],
    }
    # The left-padded batch gives the same vectors (RoPE is relative; the
    # padding is masked) up to float rounding.
    for r in range(len(lens)):
        d = (pools["last-token"][r] - pools["last-token-left"][r]).abs().max().item()
        assert d < 5e-6, (name, r, d)
    cases = []
    for r, s in enumerate(SENTENCES):
        ids = enc["input_ids"][r, : lens[r]].tolist()
        cases.append({
            "text": s, "ids": ids, "truncated": full[r] > MAX_LEN,
            "hidden_states": [[f32(hs[l][r, i]) for i in range(lens[r])] for l in range(n + 1)],
        })
    golden = {
        "model_type": cfg.model_type, "max_len": MAX_LEN, "cases": cases,
        "poolings": {k: [f32(v) for v in vs] for k, vs in pools.items()},
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print(name, "lens", lens, "full", full, sizes, file=sys.stderr)
    return model, fast, out


def st_dirs(root, gemma_dir, qwen_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    texts = SENTENCES[:4] + ["A man rides a horse."]
    base = os.path.join(root, "tiny-st-decoders")
    if os.path.isdir(base):
        shutil.rmtree(base)

    def dense(din, dout, seed):
        d = Dense(din, dout, bias=False, activation_function=torch.nn.Identity())
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            d.linear.weight.copy_(torch.randn(dout, din, generator=g) * (1.5 / din**0.5))
        return d

    def save(name, modules, tweak=None):
        out = os.path.join(base, name)
        SentenceTransformer(modules=modules, device="cpu").save(out)
        if tweak:
            tweak(out)
        m = SentenceTransformer(out, device="cpu")
        v = m.encode(texts, batch_size=3, convert_to_numpy=True)
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"texts": texts, "vectors": v.astype(float).tolist()}, f)
        for dirpath, _, files in os.walk(out):
            for fname in files:
                if fname == "README.md":
                    os.remove(os.path.join(dirpath, fname))
        print(name, v.shape, file=sys.stderr)

    t = Transformer(gemma_dir, max_seq_length=MAX_LEN)
    save("gemma-dense", [t, Pooling(HIDDEN, pooling_mode="mean"), dense(HIDDEN, 48, 1), dense(48, 16, 2), Normalize()])

    t = Transformer(qwen_dir, max_seq_length=MAX_LEN, tokenizer_args={"padding_side": "left"})
    save("qwen-lasttoken", [t, Pooling(HIDDEN, pooling_mode="lasttoken"), Normalize()])


if __name__ == "__main__":
    root = sys.argv[1]
    dirs = {}
    for seed, name in enumerate(["qwen3", "qwen2", "gemma3", "eurobert"]):
        model, fast, out = make(name, root, seed + 11)
        # sentence-transformers loads the tokenizer from the directory
        fast.save_pretrained(out)
        dirs[name] = out
    st_dirs(root, dirs["gemma3"], dirs["qwen3"])
