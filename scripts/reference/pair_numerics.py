#!/usr/bin/env python3
"""Rounding error of the fp32 pair kernel (Winograd's inner product,
`BERTFLOW_FP32_KERNEL=avx512pair`) against the classical product, on a real
model's layer inputs: benchmarks/encode.md, "fp32 by pairs".

    python scripts/reference/pair_numerics.py [--model models/all-MiniLM-L6-v2]

Captures every nn.Linear's input (PyTorch forward hooks, a few sentences) and
simulates in float32 with NumPy, one rounding per operation as the kernels do
(the multiply-add rounded twice here, slightly worse than an FMA):
  classical  acc += x[i] w[i], in order over k;
  pairs      acc += (x[2i] + w'[2i+1]) (x[2i+1] + w'[2i]), then
             ((acc - R(x)) - C(w')) / s, with w' = s w per output channel, s the
             power of two (>= 1) that brings the channel's rms nearest 1;
  unscaled   the same with s = 1.
Prints per layer the largest error relative to the largest |output|, against
float64. Needs torch, transformers and numpy (the reference environment).
"""
import argparse

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

SENTENCES = [
    "A man is playing a guitar on the stage tonight.",
    "The cat sat on the mat.",
    "Stocks fell sharply after the central bank raised interest rates again.",
]


def channel_scales(y, scaled):
    """Per output channel (columns of y [k, n]): the kernel's power-of-two scale."""
    if not scaled:
        return np.ones(y.shape[1], np.float32)
    ms = (y.astype(np.float64) ** 2).mean(0)
    e = np.where(ms > 0, np.clip(np.round(-0.5 * np.log2(np.where(ms > 0, ms, 1))), 0, 40), 0)
    return np.exp2(e).astype(np.float32)


def pairs(x, w, scaled):
    y = w.T.astype(np.float32)
    s = channel_scales(y, scaled)
    ys = (y * s).astype(np.float32)
    xa, xb, ya, yb = x[:, 0::2], x[:, 1::2], ys[0::2], ys[1::2]
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for j in range(xa.shape[1]):
        t1 = xa[:, j : j + 1] + yb[j][None, :]
        t2 = xb[:, j : j + 1] + ya[j][None, :]
        acc = (acc + t1 * t2).astype(np.float32)
    r = (xa.astype(np.float64) * xb).sum(1).astype(np.float32)
    c = (ya.astype(np.float64) * yb).sum(0).astype(np.float32)
    return (((acc - r[:, None]) - c[None, :]) * (np.float32(1) / s)).astype(np.float32)


def classical(x, w):
    y = w.T.astype(np.float32)
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for j in range(x.shape[1]):
        acc = (acc + x[:, j : j + 1] * y[j][None, :]).astype(np.float32)
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).eval()
    caps = []

    def hook(mod, inp, _out):
        x = inp[0].detach()
        caps.append((mod, x.reshape(-1, x.shape[-1]).numpy().astype(np.float32)))

    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        model(**tok(SENTENCES, padding=True, return_tensors="pt"))
    worst = {"classical": 0.0, "pairs, unscaled": 0.0, "pairs, scaled": 0.0}
    print(f"{'layer [n, k]':14} {'classical':>10} {'unscaled':>10} {'scaled':>10}")
    for mod, x in caps:
        w = mod.weight.detach().numpy()
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        big = np.abs(ref).max()
        errs = {
            "classical": np.abs(classical(x, w) - ref).max() / big,
            "pairs, unscaled": np.abs(pairs(x, w, False) - ref).max() / big,
            "pairs, scaled": np.abs(pairs(x, w, True) - ref).max() / big,
        }
        for k, v in errs.items():
            worst[k] = max(worst[k], v)
        print(f"{str(list(w.shape)):14} " + " ".join(f"{v:10.1e}" for v in errs.values()))
    print("largest: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
