#!/usr/bin/env python3
"""SDPA's CUDA kernels on the compiled step's three attention shapes (issue 21, docs/KERNELS.md).

The base preset at batch 16 runs three attentions a layer, all 16 heads of 96 (bfloat16): the
joint self-attention (608 queries and keys), the video tokens over the text context (576 over
129) and the action tokens over the VLM context (32 over 1025), each with an additive bias of
[16, 1, Nq, Nk] built once a step (stages/models/world_model.cc, `attention_bias`: 0 or -inf, rows
padded to 16 elements). This times forward and forward + backward of each shape under each of
SDPA's backends that takes such a bias (cuDNN, memory-efficient, math), the bias with a row per
query and as one row expanded over the queries (all a key-padding mask needs), and flash
attention with no bias as the bound a bias costs against: the step picks its kernels and bias
forms from these measurements, not from the dispatcher's default.

Usage (PyTorch 2 with CUDA):
    python3 scripts/attention-bench.py [--iters 20] [--batch 16] [--eager] [--json FILE]
Prints one line per shape and backend: forward ms, forward + backward ms, and the achieved TFLOPS
of forward + backward (2.5 x the forward's 4 Nq Nk d FLOP per head).
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, HEAD_DIM = 16, 96
SHAPES = {  # name: (queries, keys)
    "joint 608x608": (608, 608),
    "video over text 576x129": (576, 129),
    "action over VLM 32x1025": (32, 1025),
}
BACKENDS = {  # name: (backend, bias form)
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "rows"),
    "cudnn, key bias": (SDPBackend.CUDNN_ATTENTION, "keys"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "rows"),
    "efficient, key bias": (SDPBackend.EFFICIENT_ATTENTION, "keys"),
    "math": (SDPBackend.MATH, "rows"),
    "flash, no bias": (SDPBackend.FLASH_ATTENTION, None),
}


def padded_bias(batch, queries, keys, form, device):
    """The model's bias, rows padded to 16 elements, the last tenth of half the samples' keys
    masked: one row per query ("rows", as the model builds it) or one row for all queries
    ("keys", expanded with stride 0: what a key-padding mask needs)."""
    padded = (keys + 15) // 16 * 16
    rows = queries if form == "rows" else 1
    bias = torch.zeros(batch, 1, rows, padded, device=device, dtype=torch.bfloat16)
    bias = bias.narrow(3, 0, keys)
    bias[: batch // 2, :, :, keys - keys // 10 :] = float("-inf")
    return bias.expand(batch, 1, queries, keys)


def time_ms(fn, iters, eager):
    """Device time of fn: captured once as a CUDA graph, as the compiled step runs it, and replayed,
    so that the host's launch cost (SDPA's dispatch, cuDNN's plan lookup), which can exceed these
    kernels' own time, is not in the figure; `eager`: fn launched op by op, host cost included."""
    if eager:
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capturing stream, as capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def bench(queries, keys, backend, form, batch, iters, eager):
    device = "cuda"
    # [B, N, H, d] transposed to [B, H, N, d], the strides the model hands SDPA.
    q = torch.randn(batch, queries, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
    k = torch.randn(batch, keys, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
    v = torch.randn(batch, keys, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
    q, k, v = (t.transpose(1, 2).requires_grad_() for t in (q, k, v))
    bias = None if form is None else padded_bias(batch, queries, keys, form, device)
    grad = torch.randn(batch, HEADS, queries, HEAD_DIM, device=device, dtype=torch.bfloat16)

    def forward():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    def forward_backward():
        out = forward()
        torch.autograd.grad(out, (q, k, v), grad)

    with torch.no_grad():
        fwd = time_ms(forward, iters, eager)
    both = time_ms(forward_backward, iters, eager)
    flop = 2.5 * 4 * batch * HEADS * queries * keys * HEAD_DIM
    return fwd, both, flop / (both * 1e-3) / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--eager", action="store_true",
                        help="launch op by op (host cost included) instead of replaying a graph")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention-bench: needs PyTorch with CUDA (this one has none)")
    print(f"attention-bench: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}, "
          f"batch {args.batch}, {HEADS} heads of {HEAD_DIM}, bfloat16, {args.iters} iterations, "
          + ("launched op by op" if args.eager else "replayed as a CUDA graph"))
    rows = []
    for shape, (queries, keys) in SHAPES.items():
        for name, (backend, form) in BACKENDS.items():
            try:
                fwd, both, tflops = bench(queries, keys, backend, form, args.batch, args.iters,
                                          args.eager)
                line = f"{fwd:8.3f} ms fwd {both:8.3f} ms fwd+bwd {tflops:6.1f} TFLOPS"
                rows.append({"shape": shape, "backend": name, "forward_ms": fwd,
                             "forward_backward_ms": both, "tflops": tflops})
            except RuntimeError as e:  # a backend refusing the shape says why
                line = "refused: " + str(e).splitlines()[0][:100]
            print(f"  {shape:26s} {name:15s} {line}", flush=True)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
