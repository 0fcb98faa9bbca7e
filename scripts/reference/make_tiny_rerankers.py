"""Tiny random cross-encoders (sequence-classification checkpoints) of every
family bertflow runs, with transformers' logits, for the reranker golden tests
(no PyTorch in CI).

    /work/wt/venv-ref/bin/python scripts/reference/make_tiny_rerankers.py crates/encoder/tests/fixtures

Writes tiny-<name>-cls/ for bert (two labels, token types), roberta,
xlm-roberta, camembert, distilbert, mpnet and modernbert (one label each):
config.json (architectures = the *ForSequenceClassification class, id2label),
tokenizer.json (the tokenizers of make_tiny_models.py, WordPiece with BERT's
pair template for bert, byte-level BPE with ModernBERT's `[CLS] $A [SEP] $B
[SEP]` for modernbert), the weights as transformers names them (base-model
prefix included), and golden.json: `max_len` and, for single texts and text
pairs (one pair cut by longest_first truncation on its long side, one on both
sides), the ids and token types transformers' tokenizer gives
(`truncation=True, max_length=max_len`) and the logits of the model on that
input alone (no padding); for the inputs cut, under `left` the same with
`truncation_side="left"` (TEI's `truncation_direction: Left`).

Hidden 32, 2 layers (ModernBERT 3, local window 4, mean pooling), weights
drawn wide (std 0.2, LayerNorm around 1) so that every layer and the head move
the logits.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertTokenizer,
    CamembertForSequenceClassification,
    DistilBertForSequenceClassification,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    MPNetForSequenceClassification,
    PreTrainedTokenizerFast,
    RobertaForSequenceClassification,
    XLMRobertaForSequenceClassification,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import CORPUS, HEADS, HIDDEN, INTER, LAYERS, POSITIONS, build, randomize, wordpiece_vocab  # noqa: E402

LONG = " ".join(["the woman is playing the guitar on the mat and the dog runs"] * 6)
INPUTS = [
    ["A man is playing a guitar.", None],
    ["Hi", None],
    ["a man plays the piano", "A man is playing a guitar."],
    ["The cat sleeps!", "a dog is running in the park"],
    ["très bien, merci", "Ça marche très bien, 42 fois?"],
    # The long text alone and beside a short query: cut on its side only.
    [LONG, None],
    ["where does the dog run?", LONG],
    # Both long: longest_first cuts both.
    [LONG, "Two dogs run in the park, " + LONG],
]
CLASSES = {
    "roberta": RobertaForSequenceClassification,
    "xlm-roberta": XLMRobertaForSequenceClassification,
    "camembert": CamembertForSequenceClassification,
    "distilbert": DistilBertForSequenceClassification,
    "mpnet": MPNetForSequenceClassification,
}
WEIGHTS = {"distilbert": "pytorch_model.bin", "camembert": "pytorch_model.bin"}


def modernbert():
    special = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    t = Tokenizer(models.BPE(unk_token="[UNK]"))
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    cls_id, sep_id, pad_id = (t.token_to_id(x) for x in ("[CLS]", "[SEP]", "[PAD]"))
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", cls_token="[CLS]",
                                  sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")
    cfg = ModernBertConfig(
        vocab_size=t.get_vocab_size(), hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=HEADS, hidden_activation="gelu", max_position_embeddings=64,
        global_attn_every_n_layers=2, local_attention=4, norm_eps=1e-5, pad_token_id=pad_id,
        cls_token_id=cls_id, sep_token_id=sep_id, bos_token_id=cls_id, eos_token_id=sep_id,
        classifier_pooling="mean", classifier_activation="gelu", attn_implementation="eager",
        num_labels=1)
    return cfg, ModernBertForSequenceClassification, tok, "model.safetensors", 64


def family(name):
    """(config, model class, tokenizer, weights file, max_len)"""
    if name == "bert":
        vocab = wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        path = "/tmp/tiny-bert-cls-vocab.txt"
        with open(path, "w") as f:
            f.write("".join(t + "\n" for t in sorted(vocab, key=vocab.get)))
        tok = BertTokenizer(path, do_lower_case=True)
        cfg = BertConfig(vocab_size=len(vocab), hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, intermediate_size=INTER,
                         max_position_embeddings=POSITIONS, type_vocab_size=2, layer_norm_eps=1e-5,
                         id2label={0: "contradiction", 1: "entailment"},
                         label2id={"contradiction": 0, "entailment": 1})
        return cfg, BertForSequenceClassification, tok, "model.safetensors", POSITIONS
    if name == "modernbert":
        return modernbert()
    cfg, _, tok, _, _ = build(name)
    cfg.vocab_size = len(tok)
    cfg.num_labels = 1
    limit = POSITIONS - (cfg.pad_token_id + 1 if name != "distilbert" else 0)
    return cfg, CLASSES[name], tok, WEIGHTS.get(name, "model.safetensors"), limit


def r9(v):
    return [float(f"{x:.9g}") for x in v]


def make(name, root, seed):
    out = os.path.join(root, f"tiny-{name}-cls")
    os.makedirs(out, exist_ok=True)
    cfg, cls, tok, wfile, limit = family(name)
    torch.manual_seed(seed)
    model = cls(cfg)
    if name == "modernbert":
        model = model.eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                p.copy_(1.0 + 0.3 * torch.randn_like(p) if "norm" in pname else 0.2 * torch.randn_like(p))
    else:
        model = randomize(model, seed)
    assert model.config.architectures is None or model.config.architectures == [cls.__name__]
    model.config.architectures = [cls.__name__]
    model.config.save_pretrained(out)
    tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if wfile.endswith(".bin"):
        torch.save(sd, os.path.join(out, wfile))
    else:
        save_file(sd, os.path.join(out, wfile))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if name == "bert" else [])
    cases = []
    for text, pair in INPUTS:
        enc = tok(text, pair, truncation=True, max_length=limit, return_tensors="pt")
        full = len(tok(text, pair)["input_ids"])
        with torch.no_grad():
            logits = model(**{k: enc[k] for k in names}).logits[0]
        types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else [0] * enc["input_ids"].shape[1]
        case = {"text": text, "pair": pair, "ids": enc["input_ids"][0].tolist(), "types": types,
                "truncated": full > limit, "logits": r9(logits.tolist())}
        if full > limit:
            # The same input cut on the left (TEI's truncation_direction "Left").
            tok.truncation_side = "left"
            enc = tok(text, pair, truncation=True, max_length=limit, return_tensors="pt")
            tok.truncation_side = "right"
            with torch.no_grad():
                logits = model(**{k: enc[k] for k in names}).logits[0]
            types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else [0] * enc["input_ids"].shape[1]
            case["left"] = {"ids": enc["input_ids"][0].tolist(), "types": types, "logits": r9(logits.tolist())}
        cases.append(case)
    assert any(c["truncated"] and c["pair"] for c in cases)
    golden = {"class": cls.__name__, "max_len": limit, "labels": [cfg.id2label[i] for i in range(cfg.num_labels)],
              "cases": cases}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    print(name, "limit", limit, "lens", [len(c["ids"]) for c in cases], sizes)


if __name__ == "__main__":
    root = sys.argv[1]
    for seed, name in enumerate(["bert", "roberta", "xlm-roberta", "camembert", "distilbert", "mpnet", "modernbert"]):
        make(name, root, seed + 11)
