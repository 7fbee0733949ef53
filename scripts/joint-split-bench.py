#!/usr/bin/env python3
"""The joint attention split by the rows' visible keys, against one masked call (issue 21).

The joint self-attention's mask (stages/models/world_model.cc, `joint_attention_mask`) lets the
condition frames' rows see the condition frames alone, each later frame's rows the frames up to
their own, and the delta queries and the action rows everything: each row sees a prefix of the
keys. One SDPA call with the mask as a bias computes every score, a third of them masked (65% of
the 608 x 608 scores are visible at the base preset: 5 latent frames of 96 tokens, the delta
group of 96, 32 action rows). Split into groups of rows, each group's call takes only the keys
its rows can see, a prefix, as a narrowed view: no copy of q, k or v. What the split adds is each
group's key and value gradients summed into the whole one, and the query gradient gathered from
the groups'. Every variant, the whole call too, copies its output once, as the model copies it
into the experts' token tensors (models/split_attention.h, version 39 in docs/KERNELS.md).

This times, replayed as a CUDA graph, cuDNN's forward and forward + backward of the whole masked
call and of each split (named by their group count), the copies and sums included, and checks
that each split gives the whole call's output and gradients (max abs difference, bfloat16).

Usage (PyTorch 2 with CUDA):
    python3 scripts/joint-split-bench.py [--iters 20] [--batch 16]
With --check-cpu (any PyTorch, no GPU): the splits' logic against the masked attention in float64
on the CPU with small shapes and the ops of torch.autograd, then exits.
"""

import argparse
import importlib.util
import os
import sys

import torch

HEADS, HEAD_DIM = 16, 96
CONDITION_FRAMES = 3  # anchor, recent, current: they see each other (world_model.cc)
RECENT_FRAME = 1


def joint_allowed(batch, frames, hw, actions, device):
    """The model's joint mask, true = may attend, [B, 1, N, N]: half the samples with a padded
    recent frame and their last quarter of action rows padded."""
    video = (frames + 1) * hw
    frame_of = torch.arange(frames + 1, device=device).repeat_interleave(hw)
    visible_up_to = frame_of.clamp_min(CONDITION_FRAMES - 1)
    video_video = frame_of.view(1, -1) <= visible_up_to.view(-1, 1)
    recent_pad = torch.zeros(batch, dtype=torch.bool, device=device)
    recent_pad[: batch // 2] = True
    action_pad = torch.zeros(batch, actions, dtype=torch.bool, device=device)
    action_pad[: batch // 2, actions - actions // 4:] = True
    video_key_ok = torch.ones(batch, video, dtype=torch.bool, device=device)
    video_key_ok[:, RECENT_FRAME * hw:(RECENT_FRAME + 1) * hw] = ~recent_pad.view(-1, 1)
    video_rows = torch.cat([video_video.unsqueeze(0) & video_key_ok.unsqueeze(1),
                            torch.zeros(batch, video, actions, dtype=torch.bool, device=device)], 2)
    action_rows = torch.cat([video_key_ok.unsqueeze(1).expand(batch, actions, video),
                             (~action_pad).unsqueeze(1).expand(batch, actions, actions)], 2)
    return torch.cat([video_rows, action_rows], 1).unsqueeze(1)


def bias_of(allowed, dtype):
    """0 / -inf, rows padded to 16 elements, as the model's attention_bias."""
    keys = allowed.size(3)
    padded = (keys + 15) // 16 * 16
    bias = torch.zeros(*allowed.shape[:3], padded, dtype=dtype, device=allowed.device)
    bias = bias.narrow(3, 0, keys)
    bias.masked_fill_(~allowed, float("-inf"))
    return bias


def splits(frames, hw, actions):
    """Row groups of the base preset's geometry, as (first row, rows, visible keys) lists, named by
    their count ("+a": the action rows a group of their own): every group's rows see no key
    beyond its prefix."""
    video = (frames + 1) * hw
    total = video + actions
    cond = CONDITION_FRAMES * hw
    groups = {"whole": [(0, total, total)],
              "2": [(0, cond, cond), (cond, total - cond, total)]}
    three_end = (frames) * hw  # the last future frame's rows end here
    groups["3"] = [(0, cond, cond), (cond, three_end - cond, three_end),
                   (three_end, total - three_end, total)]
    per_frame = [(0, cond, cond)]
    for f in range(CONDITION_FRAMES, frames):
        per_frame.append((f * hw, hw, (f + 1) * hw))
    per_frame.append((frames * hw, total - frames * hw, total))
    groups[str(len(per_frame))] = per_frame
    # Cut at the experts' boundary too (the video stream's rows, then the action rows), so that
    # no group's output spans both experts' tokens.
    groups["2+a"] = [(0, cond, cond), (cond, video - cond, video), (video, actions, total)]
    groups[f"{len(per_frame)}+a"] = per_frame[:-1] + [(frames * hw, hw, video),
                                                       (video, actions, total)]
    return groups


def check_groups(allowed, groups):
    """Every row's visible keys lie inside its group's prefix."""
    for first, rows, keys in groups:
        beyond = allowed[:, :, first:first + rows, keys:]
        if beyond.any():
            raise SystemExit(f"joint-split-bench: rows {first}..{first + rows} see keys beyond "
                             f"{keys}")


def cudnn_forward(q, k, v, bias):
    """Output and logsumexp, by cuDNN (SDPA's kernels for the step's shapes)."""
    out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, True)
    return out, lse


def cudnn_backward(grad, q, k, v, bias, out, lse):
    empty = torch.empty(0, device=q.device)
    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        grad, q, k, v, out, lse, empty, empty, bias, empty, empty, q.size(2), k.size(2), 0.0,
        False)


def math_forward(q, k, v, bias):
    """The same in float64 on the CPU: the check's reference ops."""
    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + bias
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


def math_backward(grad, q, k, v, bias, out, lse):
    scale = q.size(-1) ** -0.5
    probs = (q @ k.transpose(-1, -2) * scale + bias - lse.unsqueeze(-1)).exp()
    grad_probs = grad @ v.transpose(-1, -2)
    grad_scores = probs * (grad_probs - (grad * out).sum(-1, keepdim=True))
    return (grad_scores @ k * scale, grad_scores.transpose(-1, -2) @ q * scale,
            probs.transpose(-1, -2) @ grad)


def split_forward(q, k, v, bias, groups, forward=cudnn_forward):
    """The output [B, H, N, d] (laid out as q) with each group's rows copied in, as the model
    copies them into the experts' token tensors, and each group's logsumexp: its rows over its
    prefix of the keys, all views."""
    out = torch.empty_like(q)
    lses = []
    for first, rows, keys in groups:
        piece, lse = forward(q.narrow(2, first, rows), k.narrow(2, 0, keys), v.narrow(2, 0, keys),
                             bias.narrow(2, first, rows).narrow(3, 0, keys))
        out.narrow(2, first, rows).copy_(piece)
        lses.append(lse)
    return out, lses


def split_backward(q, k, v, bias, groups, forward_result, grad, backward=cudnn_backward):
    """The query gradient gathered into a whole one, the key and value gradients summed into whole
    ones. Each group's output and output gradient go in as views of the same strides (cuDNN's
    backward copies a gradient whose strides differ from the output's)."""
    out, lses = forward_result
    grad_q = torch.empty_like(q)
    grad_k = grad_v = None
    # Largest prefix first: its gradients are the whole ones the others add into.
    for g in sorted(range(len(groups)), key=lambda g: -groups[g][2]):
        first, rows, keys = groups[g]
        dq, dk, dv = backward(grad.narrow(2, first, rows), q.narrow(2, first, rows),
                              k.narrow(2, 0, keys), v.narrow(2, 0, keys),
                              bias.narrow(2, first, rows).narrow(3, 0, keys),
                              out.narrow(2, first, rows), lses[g])
        grad_q.narrow(2, first, rows).copy_(dq)
        if grad_k is None:
            grad_k, grad_v = dk, dv
        else:
            grad_k.narrow(2, 0, keys).add_(dk)
            grad_v.narrow(2, 0, keys).add_(dv)
    return grad_q, grad_k, grad_v


def check_cpu():
    """The splits, forward and backward as timed, against torch.autograd through the whole masked
    attention, in float64 on small shapes."""
    batch, heads, head_dim, frames, hw, actions = 4, 2, 8, 5, 6, 4
    allowed = joint_allowed(batch, frames, hw, actions, "cpu")
    n = allowed.size(2)
    bias = bias_of(allowed, torch.float64)
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, head_dim, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(batch, n, heads, head_dim, dtype=torch.float64).transpose(1, 2)
    whole = math_forward(q, k, v, bias)[0]
    expected = (whole,) + torch.autograd.grad(whole, (q, k, v), grad)
    q, k, v = q.detach(), k.detach(), v.detach()
    for name, groups in splits(frames, hw, actions).items():
        check_groups(allowed, groups)
        result = split_forward(q, k, v, bias, groups, math_forward)
        grad_q, grad_k, grad_v = split_backward(q, k, v, bias, groups, result, grad,
                                                math_backward)
        got = (result[0], grad_q, grad_k, grad_v)
        error = max((a - b).abs().max().item() for a, b in zip(got, expected))
        print(f"  split {name:6s} {len(groups)} groups: max abs difference {error:.2e}")
        if error > 1e-10:
            raise SystemExit("joint-split-bench: the split differs from the whole call")


def load_time_ms():
    """scripts/attention-bench.py's timer (a CUDA graph replayed), shared, not copied."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention-bench.py")
    spec = importlib.util.spec_from_file_location("attention_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.time_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--check-cpu", action="store_true",
                        help="check the splits' logic on the CPU in float64 and exit")
    args = parser.parse_args()
    if args.check_cpu:
        check_cpu()
        return
    if not torch.cuda.is_available():
        sys.exit("joint-split-bench: needs PyTorch with CUDA (this one has none)")
    time_ms = load_time_ms()
    frames, hw, actions = CONDITION_FRAMES + 2, 96, 32  # the base preset at RoboTwin's shapes
    allowed = joint_allowed(args.batch, frames, hw, actions, "cuda")
    n = allowed.size(2)
    bias = bias_of(allowed, torch.bfloat16)
    # [B, N, H, d] transposed to [B, H, N, d], the strides the model hands SDPA.
    q, k, v = (torch.randn(args.batch, n, HEADS, HEAD_DIM, device="cuda",
                           dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    # The output gradient laid out as the output: the experts' token tensors' [B, N, H * d].
    grad = torch.randn(args.batch, n, HEADS, HEAD_DIM, device="cuda",
                       dtype=torch.bfloat16).transpose(1, 2)
    visible = allowed[0, 0].sum().item() / n / n
    print(f"joint-split-bench: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}, "
          f"batch {args.batch}, {n} x {n}, {HEADS} heads of {HEAD_DIM}, bfloat16, "
          f"{visible:.0%} of the scores visible (sample 0), {args.iters} iterations as a CUDA graph")
    reference = None
    for name, groups in splits(frames, hw, actions).items():
        check_groups(allowed, groups)
        with torch.no_grad():
            result = split_forward(q, k, v, bias, groups)
            got = (result[0],) + split_backward(q, k, v, bias, groups, result, grad)
            if reference is None:
                reference = got
            error = max((a.float() - b.float()).abs().max().item()
                        for a, b in zip(reference, got))
            fwd = time_ms(lambda: split_forward(q, k, v, bias, groups), args.iters, False)
            both = time_ms(lambda: split_backward(q, k, v, bias, groups,
                                                  split_forward(q, k, v, bias, groups), grad),
                           args.iters, False)
        work = sum(rows * keys for _, rows, keys in groups) / n / n
        prefixes = ",".join(str(keys) for _, _, keys in groups)
        print(f"  {name:6s} keys {prefixes:28s} {work:5.0%} of the scores  {fwd:7.3f} ms fwd "
              f"{both:7.3f} ms fwd+bwd  max abs difference from the whole call {error:.3g}",
              flush=True)


if __name__ == "__main__":
    main()
