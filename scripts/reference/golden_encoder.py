"""Golden vectors for bertflow's encoder tests, computed with Hugging Face transformers.

Run once with PyTorch installed (never needed by CI):
    python scripts/reference/golden_encoder.py models/all-MiniLM-L6-v2 \
        crates/encoder/tests/fixtures/golden_minilm.json

Each sentence is encoded alone (no padding), with output_hidden_states=True, and
pooled exactly as bertflow documents its poolings (hidden state 0 = embedding
output, N = last layer; averages are masked means over real tokens incl. [CLS]/[SEP]).
"""
import json
import sys

import torch
from transformers import AutoModel, AutoTokenizer

SENTENCES = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog!",
    "Résumé of the naïve café owner, façade included.",
    "北京是中国的首都。",
    "I",
    "Mr. O'Neill's 3.5% rise in Q3-2020 (see http://example.com/x?y=1) surprised analysts, didn't it?",
    "A woman is slicing an onion while a small dog watches from the kitchen floor next to a basket of "
    "laundry that nobody has folded for three days, and the radio plays an old song about the sea.",
    "",
]
# Poolings as (name, layers or special); N = last layer.
def poolings(n):
    return {
        "cls": ("cls", n),
        "pooler": ("pooler", n),
        "last-avg": ("mean", [n]),
        "first-last-avg": ("mean", [1, n]),
        "emb-last-avg": ("mean", [0, n]),
        "last2-avg": ("mean", [n - 1, n]),
        "emb-avg": ("mean", [0]),
        "layers:2,4": ("mean", [2, 4]),
    }


def encode(model, tok, text, max_len):
    enc = tok(text, return_tensors="pt", truncation=True, max_length=max_len)
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    hs = out.hidden_states
    n = len(hs) - 1
    res = {}
    for name, (kind, arg) in poolings(n).items():
        if kind == "cls":
            v = hs[arg][0, 0]
        elif kind == "pooler":
            v = out.pooler_output[0]
        else:
            h = torch.stack([hs[l][0] for l in arg]).mean(0)
            v = h.mean(0)  # every token is real: no padding here
        res[name] = [round(float(x), 7) for x in v]
    return res, int(enc["input_ids"].shape[1])


def main():
    model_dir, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    cases = []
    for max_len in (512, 16):
        for s in SENTENCES:
            vecs, ntok = encode(model, tok, s, max_len)
            ids = tok(s, truncation=True, max_length=max_len)["input_ids"]
            cases.append({"text": s, "max_len": max_len, "tokens": ntok, "ids": ids, "poolings": vecs})
    json.dump(
        {
            "generator": "scripts/reference/golden_encoder.py",
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "cases": cases,
        },
        open(out_path, "w"),
        ensure_ascii=False,
    )


if __name__ == "__main__":
    main()
