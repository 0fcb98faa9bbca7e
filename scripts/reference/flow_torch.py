#!/usr/bin/env python3
"""An independent PyTorch BERT-flow (Glow on 1x1 "images"), the reference for
`bertflow bench flow` (see scripts/bench.sh and benchmarks/flow.md).

    python scripts/reference/flow_torch.py emb.npy [--out latent.npy] [--threads 2]

Trains one epoch on the rows of `emb.npy` (an N x C float32 matrix, e.g. written by
`bertflow bench flow --save-npy emb.npy`) and prints the wall time of the training
(model construction, data-dependent initialisation and the epoch; not the loading)
and the losses; `--out` writes the transformed embeddings (the full latent).

The model follows the original BERT-flow TensorFlow code (Li et al. 2020, itself
openai/glow's `model.py` on a 1x1 image with C channels), written from that
description and not from bertflow's Rust code:

* L levels of K steps; after every level but the last the second half of the
  channels (c // 2 of them) is split off under a standard normal prior and the
  first c - c // 2 go on; the top latent has a standard normal prior. The output
  is the concatenation of the split-off parts (level 0 first) and the top latent.
* A step: actnorm -> channel reversal -> additive coupling z2 += NN(z1), where
  z1 is the first c // 2 channels.
* actnorm (Glow): y = (x + b) * exp(3 * logs), log-det sum(3 * logs); initialised
  on the first batch it sees: b = -mean, logs = log(1 / (std + 1e-6)) / 3.
* NN (Glow's `f`): Linear(C/2 -> W, no bias) + actnorm + ReLU,
  Linear(W -> W, no bias) + actnorm + ReLU, then Glow's `conv2d_zeros`: a
  zero-initialised Linear(W -> C/2, with bias) whose output is scaled by
  exp(3 * s) with s zero-initialised. Weights of the first two ~ N(0, 0.05^2).
* Loss: NLL in bits per dimension, -(log p(z) + log|det|) / (C ln 2), averaged over
  the batch. Adam (lr 1e-3, PyTorch defaults otherwise), batch 32, 1 epoch, the
  data shuffled with a seeded generator; the first shuffled batch initialises
  the actnorms (and is also the first training step). `--adam fused` selects
  PyTorch's fused Adam (the same update in one kernel for all parameters: faster
  on CPU).

Zero-variance channels (`--zero-variance`): with Glow's rule a constant channel
gets a scale of 1e6 and an unbounded likelihood, so training inflates it until
it overflows. `guard` (default) gives a channel whose variance on the
initialisation batch is zero, or at most 1e-10 times the largest variance of that
actnorm, log-scale 0 (scale 1); in the flow's own actnorms (not those inside the
coupling networks) such a channel's bias and log-scale get zero gradients, so
they stay fixed. Every initial 3 * logs is also clamped to [-12, 12]. `glow`
applies Glow's rule unchanged; that is only usable when no channel is constant:
on the all-MiniLM-L6-v2 last-avg embeddings of the STS fit corpus, whose channels
127, 223 and 319 are constant (variance 0 or ~1e-18), it diverges at step 2
(infinite loss), hence the guard (18 degenerate actnorm channels: 3 + 2 + 1 per
level, over the 3 steps of each level).

Reported losses: `initial` is the NLL of the first batch right after the
initialisation (before any update); `final` is the mean batch NLL over the
epoch. Both are the quantities `bertflow bench flow` prints. The NLL of all rows
under the trained flow is printed too (not timed).
"""
import argparse
import math
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

LOGSCALE_FACTOR = 3.0
ACTNORM_EPS = 1e-6
ZERO_VARIANCE_RTOL = 1e-10
MAX_INIT_LOG_SCALE = 12.0
LN_2PI = math.log(2.0 * math.pi)


class ActNorm(nn.Module):
    """Glow's actnorm with data-dependent initialisation on the first batch."""

    def __init__(self, channels, zero_variance, freeze_degenerate):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(channels))
        self.logs = nn.Parameter(torch.zeros(channels))
        self.zero_variance = zero_variance
        self.freeze_degenerate = freeze_degenerate
        self.initialized = False
        self.degenerate = 0

    @torch.no_grad()
    def _initialize(self, x):
        x64 = x.double()
        mean = x64.mean(0)
        var = ((x64 - mean) ** 2).mean(0)
        self.b.copy_(-mean)
        log_scale = -torch.log(var.sqrt() + ACTNORM_EPS)  # = 3 * logs
        if self.zero_variance == "guard":
            degenerate = (var <= ZERO_VARIANCE_RTOL * var.max()) | (var == 0)
            log_scale = log_scale.clamp(-MAX_INIT_LOG_SCALE, MAX_INIT_LOG_SCALE)
            log_scale[degenerate] = 0.0
            self.degenerate = int(degenerate.sum())
            if self.freeze_degenerate and self.degenerate:
                keep = (~degenerate).to(self.b.dtype)
                self.b.register_hook(lambda g: g * keep)
                self.logs.register_hook(lambda g: g * keep)
        self.logs.copy_(log_scale / LOGSCALE_FACTOR)
        self.initialized = True

    def forward(self, x):
        if not self.initialized:
            self._initialize(x)
        y = (x + self.b) * torch.exp(LOGSCALE_FACTOR * self.logs)
        return y, LOGSCALE_FACTOR * self.logs.sum()


class CouplingNN(nn.Module):
    """Glow's `f`: conv1x1(no bias)+actnorm+ReLU, twice, then conv2d_zeros."""

    def __init__(self, c_in, width, c_out, zero_variance):
        super().__init__()
        self.l1 = nn.Linear(c_in, width, bias=False)
        self.an1 = ActNorm(width, zero_variance, freeze_degenerate=False)
        self.l2 = nn.Linear(width, width, bias=False)
        self.an2 = ActNorm(width, zero_variance, freeze_degenerate=False)
        self.l3 = nn.Linear(width, c_out)
        self.logs3 = nn.Parameter(torch.zeros(c_out))
        with torch.no_grad():
            self.l1.weight.normal_(0.0, 0.05)
            self.l2.weight.normal_(0.0, 0.05)
            self.l3.weight.zero_()
            self.l3.bias.zero_()

    def forward(self, x):
        h, _ = self.an1(self.l1(x))
        h = F.relu(h)
        h, _ = self.an2(self.l2(h))
        h = F.relu(h)
        return self.l3(h) * torch.exp(LOGSCALE_FACTOR * self.logs3)


class FlowStep(nn.Module):
    """actnorm -> reverse channels -> additive coupling."""

    def __init__(self, channels, width, zero_variance):
        super().__init__()
        self.c1 = channels // 2
        self.actnorm = ActNorm(channels, zero_variance, freeze_degenerate=True)
        self.nn = CouplingNN(self.c1, width, channels - self.c1, zero_variance)

    def forward(self, x):
        x, logdet = self.actnorm(x)
        x = x.flip(1)
        z1, z2 = x[:, : self.c1], x[:, self.c1 :]
        return torch.cat([z1, z2 + self.nn(z1)], dim=1), logdet


class Glow1x1(nn.Module):
    def __init__(self, dim, levels=3, steps=3, width=32, zero_variance="guard"):
        super().__init__()
        self.dim = dim
        self.levels = nn.ModuleList()
        self.keep = []  # channels passed on by each level
        c = dim
        for level in range(levels):
            if c < 2:
                raise ValueError(f"level {level} would have {c} channel(s); use fewer levels")
            self.levels.append(nn.ModuleList([FlowStep(c, width, zero_variance) for _ in range(steps)]))
            keep = c - c // 2 if level < levels - 1 else c
            self.keep.append(keep)
            c = keep

    def forward(self, x):
        """Returns (latent z [n, dim], log p(z) [n], log|det| (scalar))."""
        logdet = x.new_zeros(())
        logp = x.new_zeros(x.shape[0])
        parts = []
        for steps, keep in zip(self.levels, self.keep):
            for step in steps:
                x, ld = step(x)
                logdet = logdet + ld
            if keep < x.shape[1]:
                split = x[:, keep:]
                parts.append(split)
                logp = logp - 0.5 * (split * split + LN_2PI).sum(1)
                x = x[:, :keep]
        parts.append(x)
        logp = logp - 0.5 * (x * x + LN_2PI).sum(1)
        return torch.cat(parts, dim=1), logp, logdet

    def nll_bits_per_dim(self, x):
        z, logp, logdet = self(x)
        return (-(logp + logdet) / (self.dim * math.log(2.0))).mean(), z


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("emb", help="N x C float32 .npy (e.g. from `bertflow bench flow --save-npy`)")
    ap.add_argument("--out", help="write the transformed embeddings (the latent) to this .npy")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads [default: torch's]")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--zero-variance", choices=["guard", "glow"], default="guard")
    ap.add_argument(
        "--adam",
        choices=["default", "foreach", "fused"],
        default="default",
        help="torch.optim.Adam implementation: default (PyTorch's choice: the per-tensor "
        "loop on CPU), foreach, or fused (one kernel for all parameters; fastest on CPU)",
    )
    ap.add_argument("--json", action="store_true", help="also print one JSON line with the results")
    a = ap.parse_args()

    if a.threads is not None:
        torch.set_num_threads(a.threads)
    x_np = np.load(a.emb).astype(np.float32, copy=False)
    if x_np.ndim != 2 or x_np.shape[0] < 2:
        sys.exit(f"{a.emb}: need a 2-D matrix with at least 2 rows, got shape {x_np.shape}")
    if not np.isfinite(x_np).all():
        sys.exit(f"{a.emb}: non-finite values")
    x = torch.from_numpy(np.ascontiguousarray(x_np))
    n, dim = x.shape
    batch = min(a.batch, n)

    start = time.perf_counter()
    cpu0 = time.process_time()
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    model = Glow1x1(dim, a.levels, a.steps, a.width, a.zero_variance)
    opt = None  # created after the initialisation pass built the parameters' values
    initial_loss = float("nan")
    final_loss = float("nan")
    steps_done = 0
    for epoch in range(a.epochs):
        order = torch.randperm(n, generator=gen)
        total = 0.0
        batches = 0
        for i in range(0, n, batch):
            xb = x[order[i : i + batch]]
            loss, _ = model.nll_bits_per_dim(xb)
            if opt is None:
                kw = {} if a.adam == "default" else {a.adam: True}
                opt = torch.optim.Adam(model.parameters(), lr=a.lr, **kw)
                initial_loss = loss.item()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            lv = loss.item()
            if not math.isfinite(lv):
                sys.exit(f"diverged at step {steps_done + 1}: loss {lv}")
            total += lv
            batches += 1
            steps_done += 1
        final_loss = total / batches
    train_s = time.perf_counter() - start
    cpu_s = time.process_time() - cpu0

    degenerate = sum(m.degenerate for m in model.modules() if isinstance(m, ActNorm))
    with torch.no_grad():
        nlls, zs = [], []
        for i in range(0, n, 4096):
            xb = x[i : i + 4096]
            z, logp, logdet = model(xb)
            nlls.append(-(logp + logdet) / (dim * math.log(2.0)))
            zs.append(z)
        data_nll = torch.cat(nlls).mean().item()
        z = torch.cat(zs)

    print(
        f"flow_torch: {n} x {dim}, L={a.levels} K={a.steps} W={a.width}, Adam lr {a.lr:g}, "
        f"batch {batch}, {a.epochs} epoch(s), torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), Adam {a.adam}, zero-variance {a.zero_variance}"
        + (f" ({degenerate} degenerate channel(s))" if degenerate else "")
    )
    print(
        f"train: {train_s:.3f} s wall, CPU {cpu_s:.2f} s, {steps_done} steps "
        f"({1e3 * train_s / steps_done:.2f} ms/step)"
    )
    print(
        f"NLL {initial_loss:.4f} -> {final_loss:.4f} bits/dim (first batch -> epoch mean); "
        f"all rows after training: {data_nll:.4f}"
    )
    if a.out:
        np.save(a.out, z.numpy().astype(np.float32))
        print(f"wrote {a.out}")
    if a.json:
        import json

        print(
            json.dumps(
                {
                    "bench": "flow_torch",
                    "rows": n,
                    "dim": dim,
                    "threads": torch.get_num_threads(),
                    "adam": a.adam,
                    "seconds": train_s,
                    "cpu_seconds": cpu_s,
                    "steps": steps_done,
                    "initial_loss": initial_loss,
                    "final_loss": final_loss,
                    "data_nll": data_nll,
                    "torch": torch.__version__,
                }
            )
        )


if __name__ == "__main__":
    main()
