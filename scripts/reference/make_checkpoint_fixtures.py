"""Fixtures for bertflow-encoder's own checkpoint readers (crates/encoder/src/checkpoint):
the same tensors written by torch.save and by safetensors, so the tests can
compare the two readers byte for byte (no PyTorch in CI).

    /work/main/.venv-ref/bin/python scripts/reference/make_checkpoint_fixtures.py crates/encoder/tests/fixtures

Writes checkpoint/:
- tiny-bert.safetensors: tiny-bert/pytorch_model.bin (a transformers save) as safetensors;
- dtypes.pt and dtypes.safetensors: a module's state dict (an OrderedDict with
  `_metadata`, pickled with BUILD) with float32, float16 (subnormal, infinity,
  -0, the largest half), bfloat16, float64 and int64 tensors, a 0-d tensor, a
  Parameter, and a row view into a larger storage (storage offset != 0);
- transposed.pt: a non-contiguous tensor, which the reader must refuse.
"""
import os
import sys
from collections import OrderedDict

import torch
from safetensors.torch import save_file

root = sys.argv[1] if len(sys.argv) > 1 else "crates/encoder/tests/fixtures"
out = os.path.join(root, "checkpoint")
os.makedirs(out, exist_ok=True)

bert = torch.load(os.path.join(root, "tiny-bert", "pytorch_model.bin"), weights_only=True)
save_file({k: v.contiguous() for k, v in bert.items()}, os.path.join(out, "tiny-bert.safetensors"))

torch.manual_seed(0)
sd = torch.nn.Linear(3, 2).state_dict()  # an OrderedDict with _metadata
assert hasattr(sd, "_metadata")
base = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
sd["f16"] = torch.tensor([1.0, -2.5, 6.0e-8, 65504.0, float("inf"), -0.0, 1e-5], dtype=torch.float16)
sd["bf16"] = torch.tensor([1.0, -3.140625, 1e-20, 3.0e38], dtype=torch.bfloat16)
sd["f64"] = torch.tensor([0.1, -1e-300, 12345.678901], dtype=torch.float64)
sd["i64"] = torch.arange(5, dtype=torch.int64) - 2
sd["scalar"] = torch.tensor(0.75)
sd["row"] = base[1]  # storage offset 4 into a 12-element storage
sd["matrix"] = torch.randn(4, 3)
sd["param"] = torch.nn.Parameter(torch.randn(2))
torch.save(sd, os.path.join(out, "dtypes.pt"))
plain = {k: v.detach().clone().contiguous() for k, v in sd.items()}
save_file(plain, os.path.join(out, "dtypes.safetensors"))

torch.save(OrderedDict(t=torch.randn(3, 2).t()), os.path.join(out, "transposed.pt"))
for f in os.listdir(out):
    os.chmod(os.path.join(out, f), 0o644)
print("wrote", sorted(os.listdir(out)))
