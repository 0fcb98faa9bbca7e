"""Tiny random checkpoints of every non-BERT architecture bertflow runs, with
transformers' vectors, for the encoder's golden tests (no PyTorch in CI).

    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_models.py crates/encoder/tests/fixtures

Writes tiny-<name>/ for roberta, xlm-roberta, camembert, distilbert and mpnet
(the BERT fixture, tiny-bert, comes from make_tiny_bert.py): config.json,
tokenizer.json (byte-level BPE for RoBERTa, SentencePiece-style Unigram for
XLM-R and CamemBERT, WordPiece for DistilBERT and MPNet, each built by the
transformers tokenizer class of the architecture), the weights (safetensors or
pytorch_model.bin, with or without the base-model prefix, f32), and golden.json:
for every sentence of one right-padded batch (one of them cut at the model's
token limit) its ids and the vectors of several poolings computed from
transformers' hidden states (output_hidden_states=True, masked means over the
real tokens). For MPNet also the relative position buckets of -300..300.

Hidden 32, 2 layers, 4 heads, intermediate 37, 40 positions; weights drawn
wider than transformers' init (std 0.2, LayerNorm around 1) so that every
layer moves the vectors.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    CamembertConfig,
    CamembertModel,
    CamembertTokenizer,
    DistilBertConfig,
    DistilBertModel,
    DistilBertTokenizer,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizer,
    RobertaConfig,
    RobertaModel,
    RobertaTokenizer,
    XLMRobertaConfig,
    XLMRobertaModel,
    XLMRobertaTokenizer,
)
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

SENTENCES = [
    "A man is playing a guitar.",
    "The cat sleeps!",
    "Two dogs run in the park, slicing onions and chasing a very fast ball while the children laugh.",
    "Hi",
    "Ça marche très bien, 42 fois?",
    # Longer than every model's limit: cut at max_tokens.
    " ".join(["the woman is playing the guitar on the mat and the dog runs"] * 6),
]
CORPUS = SENTENCES + [
    "a woman slices an onion", "the man plays the piano", "a dog is running in the park",
    "children are laughing", "the cat is sleeping on the mat", "très bien, merci",
]
WORDS = sorted({w.strip(".,!?").lower() for s in CORPUS for w in s.split()} - {""})
HIDDEN, LAYERS, HEADS, INTER, POSITIONS = 32, 2, 4, 37, 40


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def bpe_tokenizer():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    t.train_from_iterator(CORPUS, trainer)
    m = json.loads(t.to_str())["model"]
    merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
    return RobertaTokenizer(vocab=m["vocab"], merges=merges)


def unigram_pieces():
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=120, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
    )
    t.train_from_iterator(CORPUS, trainer)
    return [(p, s) for p, s in json.loads(t.to_str())["model"]["vocab"] if p != "<unk>"]


def wordpiece_vocab(specials):
    pieces = list(".,!?") + WORDS + ["##s", "##ing", "##ed", "##a", "##e"]
    return {t: i for i, t in enumerate(specials + pieces)}


def build(name):
    """(config, model class, tokenizer, weights file, prefix)"""
    common = dict(
        vocab_size=0, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=INTER, max_position_embeddings=POSITIONS, layer_norm_eps=1e-5,
    )
    if name == "roberta":
        tok = bpe_tokenizer()
        cfg = RobertaConfig(**common, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        return cfg, RobertaModel, tok, "pytorch_model.bin", "roberta."
    if name == "xlm-roberta":
        specials = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
        tok = XLMRobertaTokenizer(vocab=specials + unigram_pieces() + [("<mask>", 0.0)])
        cfg = XLMRobertaConfig(**common, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        return cfg, XLMRobertaModel, tok, "model.safetensors", ""
    if name == "camembert":
        specials = [("<s>NOTUSED", 0.0), ("<pad>", 0.0), ("</s>NOTUSED", 0.0), ("<unk>", 0.0),
                    ("<s>", 0.0), ("</s>", 0.0)]
        tok = CamembertTokenizer(vocab=specials + unigram_pieces() + [("<mask>", 0.0)])
        cfg = CamembertConfig(**common, type_vocab_size=1, pad_token_id=1, bos_token_id=4, eos_token_id=5)
        return cfg, CamembertModel, tok, "model.safetensors", "roberta."
    if name == "distilbert":
        tok = DistilBertTokenizer(vocab=wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
        cfg = DistilBertConfig(vocab_size=0, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=INTER,
                               max_position_embeddings=POSITIONS, pad_token_id=0, activation="gelu")
        return cfg, DistilBertModel, tok, "pytorch_model.bin", "distilbert."
    if name == "mpnet":
        tok = MPNetTokenizer(vocab=wordpiece_vocab(["<s>", "<pad>", "</s>", "<unk>", "[UNK]"]),
                             bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                             unk_token="[UNK]", pad_token="<pad>", mask_token="<mask>")
        cfg = MPNetConfig(**common, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          relative_attention_num_buckets=32)
        return cfg, MPNetModel, tok, "model.safetensors", ""
    raise ValueError(name)


def r7(v):
    return [float(f"{x:.8g}") for x in v]


def make(name, root, seed):
    out = os.path.join(root, f"tiny-{name}")
    os.makedirs(out, exist_ok=True)
    cfg, cls, tok, wfile, prefix = build(name)
    cfg.vocab_size = len(tok)
    torch.manual_seed(seed)
    model = randomize(cls(cfg), seed)
    cfg.to_json_file(os.path.join(out, "config.json"))
    tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
    sd = {prefix + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if wfile.endswith(".bin"):
        torch.save(sd, os.path.join(out, wfile))
    else:
        save_file(sd, os.path.join(out, wfile))
    limit = POSITIONS - (cfg.pad_token_id + 1 if name in ("roberta", "xlm-roberta", "camembert", "mpnet") else 0)
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=limit, return_tensors="pt")
    full = [len(tok(s)["input_ids"]) for s in SENTENCES]
    with torch.no_grad():
        o = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
    hs = o.hidden_states
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
    golden = {"model_type": cfg.model_type, "max_tokens": limit, "poolings": list(pools), "cases": cases}
    if name == "mpnet":
        rel = torch.arange(-300, 301)
        golden["buckets_from"] = -300
        golden["buckets"] = MPNetEncoder.relative_position_bucket(rel).tolist()
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print(name, "vocab", len(tok), "limit", limit, "lens", full, sizes)


if __name__ == "__main__":
    root = sys.argv[1]
    for seed, name in enumerate(["roberta", "xlm-roberta", "camembert", "distilbert", "mpnet"]):
        make(name, root, seed + 1)
