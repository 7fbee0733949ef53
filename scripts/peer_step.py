#!/usr/bin/env python3
"""The PyTorch peer of wam-pipeline's compiled training step (issue 21, docs/BENCHMARKS.md).

A plain PyTorch port of the MoT world action model (stages/models/world_model.cc, modulation.cc)
and of TrainStep's step (stages/train/step_runner.cc, optimizer.cc): the same modules and parameter
shapes, losses and loss weights, flow-matching noise, gradient-norm clipping, AdamW
hyper-parameters and learning-rate schedule, bf16 autocast over float32 master weights. Where our
compiled step runs fused CUDA kernels (models/fused_norm.h: LayerNorm + AdaLN modulation, q/k
RMSNorm + RoPE, the gated residual add), this runs the plain PyTorch composition of the same maths,
which is what Inductor then fuses: with `--compile per-layer` every MoT layer is compiled on its
own by torch.compile (Inductor), as the reference compiles its MoT block by block.

Timed as `wam-pipeline bench --device-only` times TrainStep: one device-resident batch (random
tensors of the shapes TrainStep receives from robotwin_compile.json, see BATCH SHAPES below) fed
to every step, `--warmup` untimed steps, then `--steps` timed ones; one host sync per step (the
losses, read together). Prints

    peer: 1047808656 parameters (configs/model/base.json), batch 16, compile per-layer, ...
    peer step: 175.20 ms per batch, peak 34.40 GiB, loss 2.3261

Usage:
    python3 scripts/peer_step.py [--model configs/model/base.json] [--batch 16]
        [--compile per-layer|none] [--recompute N] [--steps 20] [--warmup 5]
        [--device cuda|cpu] [--json FILE] [--count-only]

Runs on PyTorch 1.13 (Debian's python3-torch, /usr/bin/python3) for the CPU check with
`--device cpu --compile none`; torch.compile needs PyTorch 2.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# Constants of stages/models/world_model.cc.
NORM_EPS = 1e-6
ROPE_THETA = 10000.0
NUM_TRAIN_TIMESTEPS = 1000.0  # sigma in [0, 1] -> timestep in [0, 1000]
PATCH = 2  # patch (1, 2, 2): frames are not merged
CONDITION_FRAMES = 3  # anchor, recent, current: clean conditions on the video stream
RECENT_FRAME = 1

# TrainStep's defaults (stages/train/train_step.cc TrainStepParams, optimizer.h AdamWOptions).
LEARNING_RATE = 1e-4
WEIGHT_DECAY = 0.01
BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8
WARMUP_RATIO = 0.05
MIN_LR_RATIO = 0.01
MAX_GRAD_NORM = 1.0
VLM_CONTEXT_PAD_TO = 1024  # the compiled step pads the VLM context to this (vlm_context_pad_to)

# ------------------------------------------------------------------------------------------------
# BATCH SHAPES: what TrainStep receives from pipelines/robotwin_compile.json (batch B), one place.
# Checked against wam-pipeline on a synthetic RoboTwin dataset (`dataset synth --preset robotwin`,
# 640x480 cameras): `run pipelines/robotwin_compile.json --set include.model=configs/model/tiny.json
# --set nodes.step.params.model.X=...` with a wrong action_dim, text_dim, vlm_dim or
# future_delta_tokens names the sizes it got: action [B, 32, 80], context [B, 128, text_dim],
# vlm_context [B, 1024, vlm_dim] (robotwin_online.json, unpadded: [B, 778, vlm_dim]), 24x16 latents.
#
# - video_latents [B, 48, 3, 24, 16]: VaeEncode (stages/encode/vae_encode.cc) writes
#   [B, latent_channels, (T-1)/4+1, H/16, W/16] for Augment's 9-frame window (T = 9 -> 3 latent
#   frames: current + future_latent_frames 2) on the 384x256 canvas (stages/data/canvas_layout.h
#   kCanvasHeight x kCanvasWidth); 12 x 8 patches of 2x2 = 96 tokens a frame = future_delta_tokens.
#   dtype: the encoder's, bfloat16 on CUDA, float32 on the CPU (models/frozen_encoder.cc
#   resolve_placement, dtype "auto").
# - memory_video_anchor_latents, memory_video_recent_latents [B, 48, 1, 24, 16]: VaeEncode, same
#   dtype. memory_video_recent_is_pad bool [B, 1] (EpisodeSampler).
# - context float32 [B, 128, text_dim], context_mask bool [B, 128] all true: TextEmbed
#   (stages/encode/text_embed.cc: 128 tokens per prompt).
# - vlm_context [B, S, vlm_dim] in the encoder's dtype, vlm_mask bool [B, S]: VlmEncode, S = 3
#   cameras x 234 image tokens (480x640 RoboTwin frames fitted to 208x288 pixels, 16x16 patches,
#   docs/ENCODERS.md) + the prompt's tokens (76 for a RoboTwin task); the compiled step pads it to
#   S = 1024 (TrainStep vlm_context_pad_to; train/step_runner.cc pad_vlm_context), mask false on
#   the padding.
# - action float32 [B, 32, 80], action_is_pad bool [B, 32], action_dim_is_pad bool [B, 80],
#   proprio float32 [B, 32, 80]: EpisodeSampler (stages/data/episode_sampler.cc), RoboTwin's
#   14 dims placed at slots 0..6, 16, 40..46, 56 of the 80-D layout (configs/data/robotwin.json
#   action_layout), the other 66 padded.
LATENT_FRAMES = 3
LATENT_H, LATENT_W = 384 // 16, 256 // 16
TEXT_TOKENS = 128
VLM_IMAGE_TOKENS = 3 * (208 // 16) * (288 // 16)
VLM_PROMPT_TOKENS = 76
ACTION_ROWS = 32
ROBOTWIN_DIMS = list(range(0, 7)) + [16] + list(range(40, 47)) + [56]
# ------------------------------------------------------------------------------------------------


def autocast_dtype():
    """CUDA autocast's dtype when it is on, else None (the APIs of PyTorch 1.13 and of 2.4+)."""
    if hasattr(torch, "get_autocast_dtype"):
        on = torch.is_autocast_enabled("cuda")
        return torch.get_autocast_dtype("cuda") if on else None
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def torch_version():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())


class MoTConfig:
    """A configs/model/*.json preset (stages/models/world_model.h MoTConfig)."""

    KEYS = {
        "latent_channels": 48, "video_hidden": 3072, "video_ffn": 14336, "action_hidden": 1024,
        "action_ffn": 4096, "num_layers": 30, "num_heads": 24, "head_dim": 128,
        "text_dim": 4096, "vlm_dim": 2048, "freq_dim": 256, "action_dim": 80,
        "proprio_dim": 80, "future_delta_tokens": 96, "future_latent_frames": 2,
        "video_shift": 6.0, "action_shift": 1.0, "lambda_video": 0.5, "lambda_action": 1.0,
        "lambda_future_delta": 0.5, "semantic_alignment": True, "semantic_student_layer": 8,
        "semantic_teacher_layer": 20, "semantic_max_sigma": 0.5, "lambda_semantic": 0.1,
        "checkpoint_group": 0, "notes": "",
    }

    def __init__(self, values):
        unknown = sorted(set(values) - set(self.KEYS))
        if unknown:
            raise SystemExit(f"peer_step: unknown model config keys {unknown}")
        for key, default in self.KEYS.items():
            setattr(self, key, values.get(key, default))

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))

    def captured_layers(self):
        """Layers whose video-stream output a loss term reads: student, then teacher."""
        if not self.semantic_alignment:
            return []
        return [self.semantic_student_layer, self.semantic_teacher_layer]


def checkpoint_group_starts(num_layers, group_size, captured):
    """world_model.cc activation_checkpoint_group_starts: every group_size layers (0: one group),
    plus a split after each captured layer so that its output is a group output."""
    starts = {0}
    if group_size > 0:
        starts.update(range(group_size, num_layers, group_size))
    starts.update(layer + 1 for layer in captured if layer + 1 < num_layers)
    return sorted(starts)


# ------------------------------------------------------------------------------------------------
# Tensor helpers (world_model.cc's anonymous namespace, modulation.cc).


def plain_layer_norm(x):
    return F.layer_norm(x, (x.shape[-1],), None, None, NORM_EPS)


def fused_linears(x, layers, constant_rows=None):
    """Linear layers applied to the same input as one product over their concatenated weights;
    `constant_rows` (no gradient) projected apart and placed first along dim 1."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = torch.cat([layer.bias for layer in layers])
    out = F.linear(x, weight, bias)
    if constant_rows is not None:
        out = torch.cat([F.linear(constant_rows.detach(), weight, bias), out], 1)
    return out.split([layer.weight.shape[0] for layer in layers], -1)


def rows_per_group(rows, segment_of_group):
    """Modulation rows [B, S, D] -> [B, groups, 1, D] (modulation.cc rows_per_group)."""
    grouped = rows.index_select(1, segment_of_group) if segment_of_group is not None else rows
    return grouped.unsqueeze(2)


def grouped_view(x, groups):
    return x.reshape(x.shape[0], groups, -1, x.shape[2])


def modulate(x, shift, scale, groups, segment_of_group):
    """x * (1 + scale) + shift, one row per segment (modulation.cc modulate)."""
    return torch.addcmul(rows_per_group(shift, segment_of_group), grouped_view(x, groups),
                         rows_per_group(1 + scale, segment_of_group)).view(x.shape)


def gated(x, gate, groups, segment_of_group):
    return (grouped_view(x, groups) * rows_per_group(gate, segment_of_group)).view(x.shape)


def attention(q, k, v, allowed):
    """q, k, v [B, N, H, d]; allowed: bool (true = may attend) or an additive bias, broadcastable
    to [B, H, Nq, Nk]. world_model.cc attention: SDPA on PyTorch 2, plain softmax attention on
    1.13 (as the C++ code on LibTorch 1.13)."""
    batch, tokens = q.shape[0], q.shape[1]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hasattr(F, "scaled_dot_product_attention"):
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed)
    else:
        scores = torch.matmul(qh, kh.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[3]))
        if allowed.dtype == torch.bool:
            scores = scores.masked_fill(allowed.logical_not(), float("-inf"))
        else:
            scores = scores + allowed
        out = torch.matmul(torch.softmax(scores, -1, dtype=torch.float32).to(vh.dtype), vh)
    return out.transpose(1, 2).reshape(batch, tokens, -1)


def attention_bias(allowed, queries, dtype):
    """A bool mask [B, 1, 1 or Nq, Nk] as an additive bias [B, 1, Nq, Nk] of dtype, rows padded to
    a multiple of 16 elements (world_model.cc attention_bias: the compiled step's masks)."""
    keys = allowed.shape[3]
    padded = (keys + 15) // 16 * 16
    bias = torch.zeros(allowed.shape[0], 1, queries, padded, dtype=dtype,
                       device=allowed.device).narrow(3, 0, keys)
    return bias.masked_fill_(allowed.expand(allowed.shape[0], 1, queries, keys).logical_not(),
                             float("-inf"))


def patchify(x):
    """[B, C, F, h, w] -> [B, F*(h/2)*(w/2), C*4], tokens frame-major then row-major."""
    b, c, f, h, w = x.shape
    hp, wp = h // PATCH, w // PATCH
    return (x.reshape(b, c, f, hp, PATCH, wp, PATCH).permute(0, 2, 3, 5, 1, 4, 6)
            .reshape(b, f * hp * wp, c * PATCH * PATCH))


def unpatchify(tokens, channels, frames, hp, wp):
    b = tokens.shape[0]
    return (tokens.reshape(b, frames, hp, wp, channels, PATCH, PATCH).permute(0, 4, 1, 2, 5, 3, 6)
            .reshape(b, channels, frames, hp * PATCH, wp * PATCH))


def axis_frequencies(dims, device):
    return torch.pow(ROPE_THETA, torch.arange(0, dims, 2, dtype=torch.float32, device=device)
                     / float(dims)).reciprocal()


def rope_tables(angles):
    """RoPE as (cos, sin) [N, head_dim/2]. The C++ code multiplies by the complex64 e^(i angle);
    the same float32 products written with real tensors, which Inductor fuses (it does not lower
    complex tensors)."""
    return torch.cos(angles), torch.sin(angles)


def video_rope(frames, hp, wp, head_dim, device):
    """(frame, row, column) of every token of `frames` latent frames, then the future-delta
    queries on the same raster at frame index `frames` (Wan's split of head_dim)."""
    hw_dims = 2 * (head_dim // 6)
    frame_dims = head_dim - 2 * hw_dims
    all_frames = frames + 1
    opts = dict(dtype=torch.float32, device=device)
    f = torch.arange(all_frames, **opts).view(-1, 1, 1).expand(all_frames, hp, wp)
    r = torch.arange(hp, **opts).view(1, -1, 1).expand(all_frames, hp, wp)
    c = torch.arange(wp, **opts).view(1, 1, -1).expand(all_frames, hp, wp)
    angles = torch.cat([f.reshape(-1, 1) * axis_frequencies(frame_dims, device),
                        r.reshape(-1, 1) * axis_frequencies(hw_dims, device),
                        c.reshape(-1, 1) * axis_frequencies(hw_dims, device)], 1)
    return rope_tables(angles)


def action_rope(rows, head_dim, device):
    positions = torch.arange(rows, dtype=torch.float32, device=device).view(-1, 1)
    return rope_tables(positions * axis_frequencies(head_dim, device))


def apply_rope(x, cos, sin):
    """x [B, N, H, d]: pair (2i, 2i+1) read as x_2i + i x_2i+1, times cos + i sin, in float32."""
    b, n, h, d = x.shape
    pairs = x.float().reshape(b, n, h, d // 2, 2)
    real, imag = pairs[..., 0], pairs[..., 1]
    c, s = cos.view(1, n, 1, d // 2), sin.view(1, n, 1, d // 2)
    return torch.stack([real * c - imag * s, real * s + imag * c], -1).flatten(-2).to(x.dtype)


def sinusoidal_embedding(timesteps, freq_dim):
    """[.., freq_dim]: cos half then sin half (Wan's order)."""
    half = freq_dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32, device=timesteps.device)
                      * (-math.log(10000.0) / half))
    args = timesteps.float().unsqueeze(-1) * freqs
    return torch.cat([args.cos(), args.sin()], -1)


def modulation_table(rows, hidden, device):
    return torch.randn(rows, hidden, device=device) / math.sqrt(hidden)


# ------------------------------------------------------------------------------------------------
# Modules: the same names and shapes as the C++ modules' parameters.


class RMSNorm(nn.Module):
    """world_model.cc RMSNormImpl: at::rms_norm from PyTorch 2.4, else its own composition."""

    def __init__(self, dim, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), self.weight, NORM_EPS)
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return normed.to(x.dtype) * self.weight


class TimestepEmbedder(nn.Module):
    """Timestep -> embedding (freq_dim -> hidden MLP, SiLU) and the 6-chunk AdaLN modulation."""

    def __init__(self, freq_dim, hidden, device=None):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden, device=device), nn.SiLU(),
                                 nn.Linear(hidden, hidden, device=device))
        self.projection = nn.Linear(hidden, 6 * hidden, device=device)

    def forward(self, timesteps, dtype):
        embedding = self.mlp(sinusoidal_embedding(timesteps, self.freq_dim).to(dtype))
        return embedding, self.projection(F.silu(embedding))


class OutputHead(nn.Module):
    """Final AdaLN (shift, scale from the timestep embedding plus a learned table), projection."""

    def __init__(self, hidden, out, device=None):
        super().__init__()
        self.modulation = nn.Parameter(modulation_table(2, hidden, device))
        self.linear = nn.Linear(hidden, out, device=device)

    def forward(self, x, embedding):
        shift, scale = (self.modulation.unsqueeze(0) + embedding).unbind(1)
        return self.linear(plain_layer_norm(x) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1))


class ExpertBlock(nn.Module):
    """One expert's half of a MoT layer (world_model.cc ExpertBlockImpl)."""

    def __init__(self, hidden, ffn, heads, head_dim, context_dim, device=None):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, head_dim
        inner = heads * head_dim
        lin = lambda a, b: nn.Linear(a, b, device=device)  # noqa: E731
        self.modulation = nn.Parameter(modulation_table(6, hidden, device))
        self.q, self.k, self.v, self.o = lin(hidden, inner), lin(hidden, inner), \
            lin(hidden, inner), lin(inner, hidden)
        self.q_norm, self.k_norm = RMSNorm(inner, device), RMSNorm(inner, device)
        self.cross_norm = nn.LayerNorm(hidden, eps=NORM_EPS, device=device)
        self.cross_q, self.cross_k = lin(hidden, inner), lin(context_dim, inner)
        self.cross_v, self.cross_o = lin(context_dim, inner), lin(inner, hidden)
        self.cross_q_norm, self.cross_k_norm = RMSNorm(inner, device), RMSNorm(inner, device)
        self.ffn_in, self.ffn_out = lin(hidden, ffn), lin(ffn, hidden)

    def heads_of(self, x):
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim)

    def pre_attention(self, x, t_mod, groups, segments, cos, sin):
        b = x.shape[0]
        mods = (self.modulation.view(1, 1, 6, self.hidden)
                + t_mod.view(b, t_mod.shape[1], 6, self.hidden)).unbind(2)
        h = modulate(plain_layer_norm(x), mods[0], mods[1], groups, segments)
        q, k, v = fused_linears(h, [self.q, self.k, self.v])
        q = apply_rope(self.heads_of(self.q_norm(q)), cos, sin)
        k = apply_rope(self.heads_of(self.k_norm(k)), cos, sin)
        return q, k, self.heads_of(v), mods

    def post_attention(self, x, attended, mods, groups, segments, context, context_allowed,
                       constant_context=None):
        x = x + gated(self.o(attended), mods[2], groups, segments)
        x = x + self.cross_attention(self.cross_norm(x), context, context_allowed,
                                     constant_context)
        h = modulate(plain_layer_norm(x), mods[3], mods[4], groups, segments)
        ffn = self.ffn_out(F.gelu(self.ffn_in(h), approximate="tanh"))
        return x + gated(ffn, mods[5], groups, segments)

    def cross_attention(self, x, context, context_allowed, constant_context):
        q = self.heads_of(self.cross_q_norm(self.cross_q(x)))
        k, v = fused_linears(context, [self.cross_k, self.cross_v], constant_context)
        return self.cross_o(attention(q, self.heads_of(self.cross_k_norm(k)), self.heads_of(v),
                                      context_allowed))


class MoTLayer(nn.Module):
    """The video and action experts joined in one masked self-attention (MoTLayerImpl). Every
    argument is a tensor (or None, or a constant int) so that torch.compile sees plain inputs."""

    def __init__(self, c, device=None):
        super().__init__()
        self.video = ExpertBlock(c.video_hidden, c.video_ffn, c.num_heads, c.head_dim,
                                 c.video_hidden, device)
        self.action = ExpertBlock(c.action_hidden, c.action_ffn, c.num_heads, c.head_dim,
                                  c.vlm_dim, device)

    def forward(self, video, action, video_t_mod, action_t_mod, video_context, action_context,
                action_constant_context, video_groups, video_segments, video_cos, video_sin,
                action_cos, action_sin, joint_allowed, video_context_allowed,
                action_context_allowed):
        vq, vk, vv, vmods = self.video.pre_attention(video, video_t_mod, video_groups,
                                                     video_segments, video_cos, video_sin)
        aq, ak, av, amods = self.action.pre_attention(action, action_t_mod, 1, None, action_cos,
                                                      action_sin)
        attended = attention(torch.cat([vq, aq], 1), torch.cat([vk, ak], 1),
                             torch.cat([vv, av], 1), joint_allowed)
        n = video.shape[1]
        video_out = self.video.post_attention(video, attended.narrow(1, 0, n), vmods,
                                              video_groups, video_segments, video_context,
                                              video_context_allowed)
        action_out = self.action.post_attention(action, attended.narrow(1, n, action.shape[1]),
                                                amods, 1, None, action_context,
                                                action_context_allowed, action_constant_context)
        return video_out, action_out


def joint_attention_mask(frames, hw, recent_is_pad, action_is_pad):
    """world_model.cc joint_attention_mask: bool [B, 1, N, N], true = may attend."""
    batch, rows = action_is_pad.shape
    video_tokens = (frames + 1) * hw
    dev = action_is_pad.device
    frame_of_token = torch.arange(frames + 1, device=dev).repeat_interleave(hw)
    visible_up_to = frame_of_token.clamp_min(CONDITION_FRAMES - 1)
    video_video = frame_of_token.view(1, -1) <= visible_up_to.view(-1, 1)
    recent_visible = recent_is_pad.reshape(batch, 1).logical_not().expand(batch, hw)
    key_ok = torch.ones(batch, video_tokens, dtype=torch.bool, device=dev)
    video_key_ok = torch.cat([key_ok.narrow(1, 0, RECENT_FRAME * hw), recent_visible,
                              key_ok.narrow(1, (RECENT_FRAME + 1) * hw,
                                            video_tokens - (RECENT_FRAME + 1) * hw)], 1)
    action_key_ok = action_is_pad.logical_not()
    video_rows = torch.cat([video_video.unsqueeze(0).logical_and(video_key_ok.unsqueeze(1)),
                            torch.zeros(batch, video_tokens, rows, dtype=torch.bool, device=dev)],
                           2)
    action_rows = torch.cat([video_key_ok.unsqueeze(1).expand(batch, rows, video_tokens),
                             action_key_ok.unsqueeze(1).expand(batch, rows, rows)], 2)
    return torch.cat([video_rows, action_rows], 1).unsqueeze(1)


def context_allowed(mask):
    """Context key mask plus the always-valid proprio token: bool [B, 1, 1, L+1]."""
    ones = torch.ones(mask.shape[0], 1, dtype=torch.bool, device=mask.device)
    return torch.cat([mask.bool(), ones], 1).view(mask.shape[0], 1, 1, -1)


def semantic_alignment_loss(student, teacher, sigma, max_sigma):
    per_sample = (1 - F.cosine_similarity(student.float(), teacher.float(), -1)).mean(1)
    qualifies = sigma.float().le(max_sigma).float()
    return (per_sample * qualifies).sum() / qualifies.sum().clamp_min(1.0)


class WorldActionModel(nn.Module):
    """world_model.cc WorldActionModelImpl, registered in the same order with the same names."""

    def __init__(self, c, device=None):
        super().__init__()
        self.config = c
        patch_features = c.latent_channels * PATCH * PATCH
        lin = lambda a, b: nn.Linear(a, b, device=device)  # noqa: E731
        self.patch_embed = lin(patch_features, c.video_hidden)
        self.delta_queries = nn.Parameter(
            torch.randn(c.future_delta_tokens, c.video_hidden, device=device) * 0.02)
        self.action_embed = lin(c.action_dim, c.action_hidden)
        self.proprio_to_text = lin(c.proprio_dim, c.text_dim)
        self.proprio_to_vlm = lin(c.proprio_dim, c.vlm_dim)
        self.text_embedding = nn.Sequential(lin(c.text_dim, c.video_hidden),
                                            nn.GELU(approximate="tanh"),
                                            lin(c.video_hidden, c.video_hidden))
        self.video_time = TimestepEmbedder(c.freq_dim, c.video_hidden, device)
        self.action_time = TimestepEmbedder(c.freq_dim, c.action_hidden, device)
        self.layers = nn.ModuleList([MoTLayer(c, device) for _ in range(c.num_layers)])
        self.video_head = OutputHead(c.video_hidden, patch_features, device)
        self.delta_head = OutputHead(c.video_hidden, c.future_latent_frames * patch_features,
                                     device)
        self.action_head = OutputHead(c.action_hidden, c.action_dim, device)
        self.recompute_group = 0  # activation checkpointing: groups of this many layers (0: off)
        self.layer_calls = list(self.layers)  # what run_layers calls: compiled layers or these

    def compile_layers(self, mode):
        """Each MoT layer compiled on its own by Inductor. With inbuilt nn.Module inlining
        (PyTorch >= 2.5) the 20-30 instances share one compiled graph; the cache limit is raised
        so that older versions compile one per instance rather than falling back to eager."""
        import torch._dynamo
        limit = len(self.layers) + 8
        config = torch._dynamo.config
        # recompile_limit is cache_size_limit's newer name; whichever this version has.
        for name, value in (("recompile_limit", limit), ("cache_size_limit", limit),
                            ("accumulated_recompile_limit", 4 * limit),
                            ("accumulated_cache_size_limit", 4 * limit)):
            if hasattr(config, name):
                setattr(config, name, max(getattr(config, name), value))
        options = {} if mode == "default" else {"mode": mode}
        self.layer_calls = [torch.compile(layer, dynamic=False, **options)
                            for layer in self.layers]

    def run_layers(self, video, action, layer_args):
        """The layers in the groups of checkpoint_group_starts, each group recomputed in backward
        when recompute_group > 0 and grad is on (world_model.cc run_layers with
        recomputed_groups -1, as TrainStep's memory_budget 0 leaves it)."""
        c = self.config
        recompute = self.recompute_group > 0 and torch.is_grad_enabled()
        captured = c.captured_layers()
        starts = checkpoint_group_starts(c.num_layers, self.recompute_group if recompute else 0,
                                         captured)
        outputs = [None] * len(captured)
        for g, start in enumerate(starts):
            end = starts[g + 1] if g + 1 < len(starts) else c.num_layers

            def run_group(video, action, start=start, end=end):
                for i in range(start, end):
                    video, action = self.layer_calls[i](video, action, *layer_args)
                return video, action

            if recompute:
                video, action = torch.utils.checkpoint.checkpoint(run_group, video, action,
                                                                  use_reentrant=False)
            else:
                video, action = run_group(video, action)
            for k, layer in enumerate(captured):
                if layer == end - 1:
                    outputs[k] = video
        return video, action, outputs

    def layer_arguments(self, batch, video_t_mod, action_t_mod, video_tokens, raster,
                        compiled_structure):
        """What every layer reads besides the two streams (world_model.cc LayerInputs), in
        MoTLayer.forward's order. compiled_structure: the masks as additive biases built once per
        step and the VLM rows projected without an input gradient, as our compiled step on CUDA."""
        c = self.config
        frames, hp, wp = raster
        hw = hp * wp
        dtype = self.patch_embed.weight.dtype
        dev = batch["video_latents"].device
        rows = batch["action"].shape[1]
        proprio_row = batch["proprio"].narrow(1, 0, 1).to(dtype)
        video_context = self.text_embedding(
            torch.cat([batch["context"].to(dtype), self.proprio_to_text(proprio_row)], 1))
        vlm = batch["vlm_context"]
        segments = torch.arange(frames + 1, device=dev).ge(CONDITION_FRAMES).long()
        video_cos, video_sin = video_rope(frames, hp, wp, c.head_dim, dev)
        action_cos, action_sin = action_rope(rows, c.head_dim, dev)
        joint = joint_attention_mask(frames, hw, batch["memory_video_recent_is_pad"].bool(),
                                     batch["action_is_pad"].bool())
        video_allowed = context_allowed(batch["context_mask"])
        action_allowed = context_allowed(batch["vlm_mask"])
        if compiled_structure:
            attention_dtype = autocast_dtype() or dtype
            joint = attention_bias(joint, joint.shape[2], attention_dtype)
            video_allowed = attention_bias(video_allowed, video_tokens, attention_dtype)
            action_allowed = attention_bias(action_allowed, rows, attention_dtype)
            constant_context = vlm.to(attention_dtype)
            action_context = self.proprio_to_vlm(proprio_row)
        else:
            constant_context = None
            action_context = torch.cat([vlm.to(dtype), self.proprio_to_vlm(proprio_row)], 1)
        return (video_t_mod, action_t_mod, video_context, action_context, constant_context,
                frames + 1, segments, video_cos, video_sin, action_cos, action_sin, joint,
                video_allowed, action_allowed)

    def loss(self, batch, noise, compiled_structure):
        """The flow-matching losses (world_model.cc WorldActionModelImpl::loss). compiled_structure:
        the compiled step's choices (masks as additive biases built once, the VLM rows projected
        without an input gradient), as our compiled step makes them on CUDA."""
        c = self.config
        latents = batch["video_latents"]
        b, h, w = latents.shape[0], latents.shape[3], latents.shape[4]
        hp, wp = h // PATCH, w // PATCH
        hw = hp * wp
        assert c.future_delta_tokens == hw, (c.future_delta_tokens, hw)
        dtype = self.patch_embed.weight.dtype
        future = c.future_latent_frames
        frames = CONDITION_FRAMES + future
        dev = latents.device

        x0 = latents.float()
        current, future_x0 = x0.narrow(2, 0, 1), x0.narrow(2, 1, future)
        future_noise = noise["video_noise"].float().narrow(2, 1, future)
        video_sigma = noise["video_sigma"].float().view(b, 1, 1, 1, 1)
        future_xt = (1 - video_sigma) * future_x0 + video_sigma * future_noise
        video_target = future_noise - future_x0
        recent_keep = batch["memory_video_recent_is_pad"].reshape(b, 1, 1, 1, 1).logical_not()
        recent = batch["memory_video_recent_latents"].float() * recent_keep
        video_frames = torch.cat([batch["memory_video_anchor_latents"].float(), recent, current,
                                  future_xt], 2)
        video_tokens = torch.cat([self.patch_embed(patchify(video_frames).to(dtype)),
                                  self.delta_queries.unsqueeze(0).expand(b, hw, c.video_hidden)],
                                 1)

        rows = batch["action"].shape[1]
        dim_keep = batch["action_dim_is_pad"].logical_not().view(b, 1, c.action_dim)
        action_x0 = batch["action"].float() * dim_keep
        action_sigma = noise["action_sigma"].float().view(b, 1, 1)
        action_noise = noise["action_noise"].float()
        action_xt = (1 - action_sigma) * action_x0 + action_sigma * action_noise
        action_target = action_noise - action_x0
        action_tokens = self.action_embed(action_xt.to(dtype))

        video_timesteps = torch.stack([torch.zeros_like(noise["video_sigma"], dtype=torch.float32),
                                       noise["video_sigma"].float() * NUM_TRAIN_TIMESTEPS], 1)
        video_embedding, video_t_mod = self.video_time(video_timesteps, dtype)
        action_embedding, action_t_mod = self.action_time(
            noise["action_sigma"].float().view(b, 1) * NUM_TRAIN_TIMESTEPS, dtype)

        layer_args = self.layer_arguments(batch, video_t_mod, action_t_mod, video_tokens.shape[1],
                                          (frames, hp, wp), compiled_structure)
        video_out, action_out, captured = self.run_layers(video_tokens, action_tokens,
                                                          layer_args)

        noised_embedding = video_embedding.narrow(1, 1, 1)
        video_velocity = unpatchify(
            self.video_head(video_out.narrow(1, CONDITION_FRAMES * hw, future * hw),
                            noised_embedding), c.latent_channels, future, hp, wp)
        delta_tokens = (self.delta_head(video_out.narrow(1, frames * hw, hw), noised_embedding)
                        .view(b, hw, future, -1).transpose(1, 2).reshape(b, future * hw, -1))
        delta = unpatchify(delta_tokens, c.latent_channels, future, hp, wp)
        action_velocity = self.action_head(action_out, action_embedding)

        terms = {}
        terms["video"] = F.mse_loss(video_velocity.float(), video_target)
        terms["future_delta"] = F.mse_loss(delta.float(), future_x0 - current)
        action_weight = (batch["action_is_pad"].logical_not().view(b, rows, 1)
                         .logical_and(dim_keep).float())
        action_error = (action_velocity.float() - action_target).pow(2)
        terms["action"] = (action_error * action_weight).sum() / action_weight.sum().clamp_min(1.0)
        if c.semantic_alignment:
            student = captured[0].narrow(1, frames * hw, hw)
            teacher = captured[1].narrow(1, (frames - 1) * hw, hw).detach()
            terms["semantic"] = semantic_alignment_loss(student, teacher, noise["video_sigma"],
                                                        c.semantic_max_sigma)
        else:
            terms["semantic"] = torch.zeros((), device=dev)
        terms["total"] = (c.lambda_video * terms["video"] + c.lambda_action * terms["action"]
                          + c.lambda_future_delta * terms["future_delta"]
                          + c.lambda_semantic * terms["semantic"])
        return terms


# ------------------------------------------------------------------------------------------------
# The step (train/step_runner.cc, train/optimizer.cc).


def sample_flow_noise(batch, c, gen):
    """world_model.cc sample_flow_noise: shifted sigma s*u / (1 + (s-1)*u), u ~ U(0, 1)."""
    latents, action = batch["video_latents"], batch["action"]
    b = latents.shape[0]

    def shifted(shift):
        u = torch.rand(b, generator=gen, device=latents.device)
        return shift * u / (1 + (shift - 1) * u)

    noise = {}
    noise["video_noise"] = torch.randn(latents.shape, generator=gen, dtype=latents.dtype,
                                       device=latents.device)
    noise["video_sigma"] = shifted(c.video_shift)
    noise["action_noise"] = torch.randn(action.shape, generator=gen, dtype=action.dtype,
                                        device=action.device)
    noise["action_sigma"] = shifted(c.action_shift)
    return noise


def lr_at(step, total_steps):
    """optimizer.cc LrSchedule::at: linear warmup, then cosine to min_lr_ratio * peak."""
    warmup = math.ceil(WARMUP_RATIO * total_steps - 1e-9)
    if step <= warmup:
        return LEARNING_RATE * step / warmup
    min_lr = LEARNING_RATE * MIN_LR_RATIO
    decay_steps = total_steps - warmup
    if decay_steps <= 0:
        return min_lr
    progress = min(1.0, (step - warmup) / decay_steps)
    return min_lr + (LEARNING_RATE - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def random_batch(c, b, device, gen):
    """A batch of the BATCH SHAPES above, seeded. Encoder outputs in bf16 on CUDA, as there."""
    enc = torch.bfloat16 if device.type == "cuda" else torch.float32
    vlm_tokens = VLM_IMAGE_TOKENS + VLM_PROMPT_TOKENS
    vlm_len = VLM_CONTEXT_PAD_TO  # robotwin_compile.json's step pads on every device

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    action_dim_is_pad = torch.ones(b, c.action_dim, dtype=torch.bool)
    action_dim_is_pad[:, [d for d in ROBOTWIN_DIMS if d < c.action_dim]] = False
    vlm_mask = torch.zeros(b, vlm_len, dtype=torch.bool)
    vlm_mask[:, :vlm_tokens] = True
    vlm_context = randn(b, vlm_len, c.vlm_dim) * vlm_mask.unsqueeze(2).to(device)
    return {
        "video_latents": randn(b, c.latent_channels, LATENT_FRAMES, LATENT_H, LATENT_W, dtype=enc),
        "memory_video_anchor_latents": randn(b, c.latent_channels, 1, LATENT_H, LATENT_W,
                                             dtype=enc),
        "memory_video_recent_latents": randn(b, c.latent_channels, 1, LATENT_H, LATENT_W,
                                             dtype=enc),
        "memory_video_recent_is_pad": torch.zeros(b, 1, dtype=torch.bool, device=device),
        "context": randn(b, TEXT_TOKENS, c.text_dim),
        "context_mask": torch.ones(b, TEXT_TOKENS, dtype=torch.bool, device=device),
        "vlm_context": vlm_context.to(device=device, dtype=enc),
        "vlm_mask": vlm_mask.to(device),
        "action": randn(b, ACTION_ROWS, c.action_dim),
        "action_is_pad": torch.zeros(b, ACTION_ROWS, dtype=torch.bool, device=device),
        "action_dim_is_pad": action_dim_is_pad.to(device),
        "proprio": randn(b, ACTION_ROWS, c.proprio_dim),
    }


class Step:
    """One training step as StepRunner runs it: gradients to None, noise, forward under bf16
    autocast (CUDA), backward, clipping to MAX_GRAD_NORM, AdamW (fused on CUDA)."""

    def __init__(self, model, device, total_steps, lr):
        self.model, self.device, self.total_steps = model, device, total_steps
        self.peak_lr = lr
        self.cuda = device.type == "cuda"
        params = list(model.parameters())
        kwargs = dict(lr=lr, betas=BETAS, eps=ADAM_EPS, weight_decay=WEIGHT_DECAY)
        if self.cuda:
            kwargs["fused"] = True
        self.optimizer = torch.optim.AdamW(params, **kwargs)
        self.params = params
        self.step_count = 0

    def __call__(self, batch, gen):
        self.step_count += 1
        lr = lr_at(self.step_count, self.total_steps) * self.peak_lr / LEARNING_RATE
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        noise = sample_flow_noise(batch, self.model.config, gen)
        if self.cuda:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                terms = self.model.loss(batch, noise, compiled_structure=True)
        else:
            terms = self.model.loss(batch, noise, compiled_structure=False)
        terms["total"].backward()
        clip = dict(foreach=True) if torch_version() >= (2, 0) else {}
        torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM, **clip)
        self.optimizer.step()
        names = ["total", "video", "action", "future_delta", "semantic"]
        # The step's one host synchronisation: the five losses read together.
        values = torch.stack([terms[n].detach().float() for n in names]).tolist()
        return dict(zip(names, values))


SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
                      "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
                      "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    """{name: CPU tensor} of a safetensors file (stages/common/io/safetensors.h describes the
    format: an 8-byte little-endian header length, a JSON header, the tensors' bytes)."""
    with open(path, "rb") as f:
        header_size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_size))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        if begin == end:  # frombuffer refuses an empty buffer
            tensors[name] = torch.empty(entry["shape"], dtype=dtype)
            continue
        raw = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8)
        tensors[name] = raw.view(dtype).view(entry["shape"])
    return tensors


def load_training_state(model, path):
    """Copies the "model.*" tensors of a TrainStep training-state file (step_<N>.safetensors,
    stages/train/training_state.cc) into the model; every parameter must be there with its shape,
    and nothing else under "model.". Returns the number of tensors copied."""
    saved = {k[len("model."):]: v for k, v in read_safetensors(path).items()
             if k.startswith("model.")}
    params = dict(model.named_parameters())
    problems = [f"missing {n}" for n in sorted(set(params) - set(saved))]
    problems += [f"not in the peer: {n}" for n in sorted(set(saved) - set(params))]
    for name in sorted(set(params) & set(saved)):
        if params[name].shape != saved[name].shape:
            problems.append(f"{name}: shape {list(saved[name].shape)} in the file, "
                            f"{list(params[name].shape)} in the peer")
    if problems:
        raise SystemExit(f"peer_step: {path} does not match the peer's parameters: "
                         + "; ".join(problems))
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor)
    return len(saved)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="configs/model/base.json", help="model preset JSON")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--compile", choices=["per-layer", "none"], default="per-layer",
                   help="per-layer: each MoT layer compiled by torch.compile (Inductor)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--recompute", type=int, default=0,
                   help="activation checkpointing of every group of N layers (0: none)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--lr", type=float, default=LEARNING_RATE, help="peak learning rate")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--weights", help="start from the model weights of a TrainStep training-state "
                   "file (step_<N>.safetensors); names and shapes must match")
    p.add_argument("--count-only", action="store_true",
                   help="print the parameter count (model built on the meta device) and exit")
    args = p.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.recompute < 0:
        p.error("--batch and --steps must be >= 1, --warmup and --recompute >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    config = MoTConfig.from_file(args.model)
    if args.count_only:
        model = WorldActionModel(config, device=torch.device("meta"))
        print(f"peer: {sum(p.numel() for p in model.parameters())} parameters ({args.model})")
        return 0
    if args.compile == "per-layer" and not hasattr(torch, "compile"):
        print(f"peer_step: --compile per-layer needs torch.compile (PyTorch >= 2.0); this is "
              f"PyTorch {torch.__version__}: use --compile none", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("peer_step: --device cuda but torch.cuda.is_available() is false", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    model = WorldActionModel(config, device=device)
    model.train()
    model.recompute_group = args.recompute
    parameters = sum(p.numel() for p in model.parameters())
    if args.weights:
        loaded = load_training_state(model, args.weights)
        print(f"peer: {loaded} parameter tensors from {args.weights}", flush=True)
    if args.compile == "per-layer":
        model.compile_layers(args.compile_mode)
    data_gen = torch.Generator().manual_seed(args.seed + 1)
    batch = random_batch(config, args.batch, device, data_gen)
    noise_gen = torch.Generator(device=device).manual_seed(args.seed)
    step = Step(model, device, args.warmup + args.steps, args.lr)
    print(f"peer: {parameters} parameters ({args.model}), batch {args.batch}, compile "
          f"{args.compile}, recompute {args.recompute}, {device.type}, torch {torch.__version__}",
          flush=True)

    losses = []
    for _ in range(args.warmup):
        losses.append(step(batch, noise_gen))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    started = time.perf_counter()
    for _ in range(args.steps):
        losses.append(step(batch, noise_gen))
    if cuda:
        end.record()
        torch.cuda.synchronize(device)
        ms = begin.elapsed_time(end) / args.steps
        peak = torch.cuda.max_memory_allocated(device) / 2**30
    else:
        ms = (time.perf_counter() - started) * 1000 / args.steps
        peak = None
    loss = losses[-1]["total"]
    peak_text = f"{peak:.2f} GiB" if peak is not None else "n/a (cpu)"
    print(f"peer step: {ms:.2f} ms per batch, peak {peak_text}, loss {loss:.4f}", flush=True)
    if args.json:
        figures = {
            "model": args.model, "parameters": parameters, "batch": args.batch,
            "compile": args.compile, "compile_mode": args.compile_mode,
            "recompute": args.recompute, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch": torch.__version__, "warmup": args.warmup, "steps": args.steps,
            "step_ms": ms, "peak_gib": peak, "loss": loss, "losses": losses,
        }
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0 if all(math.isfinite(s["total"]) for s in losses) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
