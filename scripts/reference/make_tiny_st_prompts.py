"""A tiny sentence-transformers directory with prompts, with golden vectors.

Writes crates/encoder/tests/fixtures/tiny-st/prompts/: a copy of tiny-st/cls-multi
(made by make_tiny_st.py: a tiny random BERT in 0_Transformer, Pooling cls +
weightedmean + lasttoken, Dense 48->6 tanh) with a config_sentence_transformers.json
holding prompts and a default_prompt_name, and golden.json: what
sentence-transformers 6 returns for TEXTS with each way of choosing a prompt
(`encode` with no prompt, with `prompt_name=`, with `prompt=`, `encode_query`,
`encode_document`; CPU, float32).

Run in the reference environment, after make_tiny_st.py:
    /work/main/.venv-ref/bin/python scripts/reference/make_tiny_st_prompts.py
"""

import json
import os
import shutil
import sys

import numpy as np
from sentence_transformers import SentenceTransformer

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "encoder", "tests", "fixtures", "tiny-st")
SOURCE = os.path.join(FIXTURES, "cls-multi")
OUT = os.path.join(FIXTURES, "prompts")

PROMPTS = {
    "query": "someone is playing ",
    "document": "the big red ",
    "search": "query: ",
    "empty": "",
}
DEFAULT = "query"

TEXTS = [
    "a man plays guitar.",
    "the dog runs in the park",
    "cat",
    "zebra",
    "the cat sleeps on the mat, the dog runs.",
    # Cut at max_seq_length (32) once a prompt is before it.
    "a big red car and a big red dog and a cat sleeps on the mat in the sun and the man plays "
    "guitar and the dog runs in the park",
]

# name -> keyword arguments of encode (or the method to call).
CASES = {
    "default": ("encode", {}),
    "name_query": ("encode", {"prompt_name": "query"}),
    "name_document": ("encode", {"prompt_name": "document"}),
    "name_search": ("encode", {"prompt_name": "search"}),
    "name_empty": ("encode", {"prompt_name": "empty"}),
    "text": ("encode", {"prompt": "a cat "}),
    "text_empty": ("encode", {"prompt": ""}),
    "encode_query": ("encode_query", {}),
    "encode_document": ("encode_document", {}),
}


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    shutil.copytree(SOURCE, OUT)
    os.remove(os.path.join(OUT, "golden.json"))
    path = os.path.join(OUT, "config_sentence_transformers.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["prompts"] = PROMPTS
    cfg["default_prompt_name"] = DEFAULT
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    m = SentenceTransformer(OUT, device="cpu")
    assert m.default_prompt_name == DEFAULT, m.default_prompt_name
    cases = {}
    for name, (method, kwargs) in CASES.items():
        v = getattr(m, method)(TEXTS, batch_size=4, convert_to_numpy=True, **kwargs)
        assert v.dtype == np.float32 and np.isfinite(v).all()
        cases[name] = {"method": method, "kwargs": kwargs, "vectors": v.astype(float).tolist()}
    # The prompts change the vectors (else the test would prove nothing).
    base = np.array(cases["text_empty"]["vectors"])
    for name in ("default", "name_document", "name_search", "text"):
        assert np.abs(np.array(cases[name]["vectors"]) - base).max() > 1e-3, name
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"texts": TEXTS, "prompts": PROMPTS, "default_prompt_name": DEFAULT, "cases": cases}, f)
    print(OUT, len(cases), "cases", file=sys.stderr)


if __name__ == "__main__":
    main()
