#!/usr/bin/env python3
"""Export a BERT checkpoint (Hugging Face layout, e.g. models/all-MiniLM-L6-v2) to
ONNX for ONNX Runtime, and make ONNX Runtime's dynamic int8 model from it: the
peers of `bertflow --precision fp32/int8` in scripts/bench.sh (benchmarks/encode.md).

    python scripts/reference/ort_export.py [--model models/all-MiniLM-L6-v2]
        [--out target/ort] [--opset 17]

Writes OUT/model_fp32.onnx (torch.onnx.export of transformers' BertModel from the
same safetensors checkpoint bertflow loads; inputs input_ids, attention_mask,
token_type_ids [batch, seq] int64, output last_hidden_state [batch, seq, hidden],
batch and sequence axes dynamic) and OUT/model_int8.onnx
(onnxruntime.quantization.quantize_dynamic with QInt8 weights: per-tensor s8
weights, activations quantised to u8 at run time, the usual ORT recipe). Then checks
the fp32 model against PyTorch on two sentences (max abs diff < 1e-4).
"""
import argparse
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "target", "ort"))
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument(
        "--per-channel",
        action="store_true",
        help="quantize_dynamic(per_channel=True) instead of ONNX Runtime's default per-tensor weights",
    )
    a = ap.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    model_dir = os.path.normpath(a.model)
    os.makedirs(a.out, exist_ok=True)
    fp32 = os.path.join(a.out, "model_fp32.onnx")
    int8 = os.path.join(a.out, "model_int8.onnx")

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(["A man is playing a guitar.", "Two dogs run."], padding=True, return_tensors="pt")
    # token_type_ids only where the model takes them (BERT: yes; MPNet, RoBERTa: no).
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]
    args = tuple(enc[n] for n in names)

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *inputs):
            return self.m(**dict(zip(names, inputs))).last_hidden_state

    axes = {0: "batch", 1: "seq"}
    with torch.inference_mode():
        # Before the export: the exporter may leave the module in another mode.
        want = LastHidden(model).eval()(*args).numpy()
        torch.onnx.export(
            LastHidden(model),
            args,
            fp32,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**{n: axes for n in names}, "last_hidden_state": axes},
            opset_version=a.opset,
            dynamo=False,
        )
    quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=a.per_channel)

    feeds = {k: v.numpy() for k, v in zip(names, args)}
    got = ort.InferenceSession(fp32, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    diff = float(np.abs(got - want).max())
    q = ort.InferenceSession(int8, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    qdiff = float(np.abs(q - want).max())
    print(f"wrote {fp32} ({os.path.getsize(fp32) / 1e6:.1f} MB) and {int8} ({os.path.getsize(int8) / 1e6:.1f} MB)")
    print(f"fp32 ONNX vs PyTorch: max abs diff {diff:.2e}; int8: {qdiff:.2e}")
    if diff > 1e-4:
        print("error: the fp32 ONNX model disagrees with PyTorch", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
