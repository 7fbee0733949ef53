#!/usr/bin/env python3
"""FLOPs per sample of the frozen encoders' built-in stand-ins, counted from their structure.

Prints the tables of docs/ENCODERS.md: the reference-cost preset (configs/encoders/reference.json)
and today's default stand-ins, for LIBERO and RoboTwin shapes. Counts multiply-adds of
convolutions and matrix products as 2 FLOPs each (attention scores and their product with the
values included); norms, activations, softmax, RoPE and the parameter-free shortcuts are left
out (under 1% here). Also prints the stand-ins' parameter counts, which
tests/stages/encode/encoder_preset_test.cc checks against the built modules.
Usage: scripts/encoder-flops.py
"""
import math
import re

CANVAS = (384, 256)  # the VAE's video canvas [H, W] (docs/DESIGN.md section 5.4)
WINDOW_FRAMES = 9  # 33-step window, every 4th frame
# Raw current frames the VLM sees (../shared reference: LIBERO 2 x 512x512, RoboTwin 3 x 480x640)
TASKS = {"LIBERO": (2, 512, 512, "put the black bowl on the plate"),
         "RoboTwin": (3, 480, 640, "place the empty cup on the coaster")}
VIEWS = {2: ["camera 1", "camera 2"], 3: ["camera 1", "camera 2", "camera 3"]}


def conv(cin, cout, kernel_volume, outputs):
    return 2 * cin * cout * kernel_volume * outputs


# ---- VAE ------------------------------------------------------------------------------------
def wan22_vae(frames, width=160, mults=(1, 2, 4, 4), res_blocks=2, params=False):
    """Wan2.2's encoder on `frames` frames of the canvas; or its parameter count."""
    h, w = CANVAS[0] // 2, CANVAS[1] // 2  # patchify 2x2: 3 -> 12 channels
    t = frames
    flops = conv(12, width, 27, t * h * w)
    p = 12 * width * 27 + width
    temporal = [False, True, True]
    cin = width
    for i, m in enumerate(mults):
        cout = width * m
        for b in range(res_blocks):
            bin_ = cin if b == 0 else cout
            flops += conv(bin_, cout, 27, t * h * w) + conv(cout, cout, 27, t * h * w)
            p += bin_ + bin_ * cout * 27 + cout + cout + cout * cout * 27 + cout
            if bin_ != cout:
                flops += conv(bin_, cout, 1, t * h * w)
                p += bin_ * cout + cout
        if i + 1 < len(mults):
            h, w = h // 2, w // 2
            flops += conv(cout, cout, 9, t * h * w)  # stride-2 3x3 per frame
            p += cout * cout * 9 + cout
            if temporal[i]:
                t = 1 + (t - 1) // 2  # first frame alone, then kernel 3 stride 2
                flops += conv(cout, cout, 3, (t - 1) * h * w)
                p += cout * cout * 3 + cout
        cin = cout
    c = cin
    for _ in range(2):  # middle residual blocks
        flops += 2 * conv(c, c, 27, t * h * w)
        p += 2 * (c + c * c * 27 + c)
    n = h * w  # single-head attention within each frame
    flops += conv(c, 3 * c, 1, t * n) + conv(c, c, 1, t * n) + 2 * 2 * n * n * c * t
    p += c + c * 3 * c + 3 * c + c * c + c
    flops += conv(c, 96, 27, t * h * w) + conv(96, 96, 1, t * h * w)  # head, moments
    p += c + c * 96 * 27 + 96 + 96 * 96 + 96
    return p if params else flops


def compact_vae(frames, width=32, params=False):
    h, w = CANVAS[0] // 2, CANVAS[1] // 2
    t = frames
    flops = conv(12, width, 27, t * h * w)
    p = 12 * width * 27 + width
    cin = width
    for i, cout in enumerate([2 * width, 4 * width, 4 * width]):
        h, w = h // 2, w // 2
        flops += conv(cin, cout, 9, t * h * w)
        p += cin * cout * 9 + cout
        if i < 2:
            t = 1 + (t - 1) // 2
            flops += conv(cout, cout, 2, (t - 1) * h * w)
            p += cout * cout * 2 + cout
        flops += conv(cout, cout, 27, t * h * w)
        p += cout * cout * 27 + cout
        cin = cout
    flops += conv(cin, 96, 27, t * h * w)
    p += cin * 96 * 27 + 96
    return p if params else flops


def vae_per_sample(encoder):
    # The window in one call, then the anchor and the recent frame as two single frames.
    return encoder(WINDOW_FRAMES) + 2 * encoder(1)


# ---- VLM ------------------------------------------------------------------------------------
def fit(h, w, max_pixels, factor):  # models::fit_image_size (Qwen-VL's smart resize)
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    return hb, wb


def prompt_tokens(task, views):  # models::tokenize_words on models::format_vlm_prompt
    text = ("Task: " + task + "\nObservations:\n- Frame 1: Current observation; views=" +
            ", ".join(views) + ".\nInput Images: " + str(len(views)) +
            "; ordered by temporal frame, then camera view.\nOutput: Given the current "
            "multi-camera observation and task instruction, represent the task-relevant visual "
            "state needed to choose the next action.")
    return 2 + len(re.findall(r"[A-Za-z0-9\x80-\xff]+|\n|[^\sA-Za-z0-9]", text))


def block(tokens, width, heads, kv_heads, head_dim, ffn, gated, context):
    """One transformer block over `tokens` tokens, each attending to `context` keys."""
    q, kv = heads * head_dim, kv_heads * head_dim
    linear = 2 * tokens * width * (q + 2 * kv) + 2 * tokens * q * width
    mlp = 2 * tokens * width * ffn * (3 if gated else 2)
    attention = 2 * 2 * tokens * context * q
    return linear + mlp + attention


def qwen3_vl(views, height, width, task, language_width=2048, layers=28, heads=16, kv_heads=8,
             head_dim=128, mlp=6144, vision_layers=24, vision_width=1024, vision_heads=16,
             vision_mlp=4096, patch=16, merge=2, temporal_patch=2, deepstack=3, out_width=2048):
    h, w = fit(height, width, 65536, patch * merge)
    patches = (h // patch) * (w // patch)
    merged = patches // (merge * merge)
    text = prompt_tokens(task, VIEWS[views])
    f = {}
    f["patch embedding"] = views * conv(3 * temporal_patch, vision_width, patch * patch, patches)
    f["vision tower"] = views * vision_layers * block(
        patches, vision_width, vision_heads, vision_heads, vision_width // vision_heads,
        vision_mlp, False, patches)
    grouped = vision_width * merge * merge
    f["mergers"] = (1 + deepstack) * views * merged * 2 * grouped * (grouped + language_width)
    s = views * merged + text
    f["language model"] = layers * block(s, language_width, heads, kv_heads, head_dim, mlp, True, s)
    if out_width != language_width:
        f["projection"] = 2 * s * language_width * out_width
    return f, (h, w, patches, merged, text)


def compact_vlm(views, height, width, task, w=2048, layers=2, heads=16, patch=16):
    h, wd = fit(height, width, 65536, patch)
    patches = (h // patch) * (wd // patch)
    text = prompt_tokens(task, VIEWS[views])
    f = {}
    n = views * patches
    f["patch embedding"] = views * conv(3, w, patch * patch, patches)
    # one block over every patch of the sample (a dense mask keeps images apart)
    f["vision block"] = block(n, w, heads, heads, w // heads, 2 * w, True, n)
    s = n + text
    f["language model"] = layers * block(s, w, heads, heads, w // heads, 2 * w, True, s)
    return f, (h, wd, patches, patches, text)


# ---- Text encoder ---------------------------------------------------------------------------
def text_encoder(width, layers, heads, ffn, text_dim=4096, tokens=128):
    return (layers * block(tokens, width, heads, heads, width // heads, ffn, True, tokens) +
            2 * tokens * width * text_dim)


def g(x):
    return f"{x / 1e9:,.1f}"


def main():
    print("VAE, per sample (window of 9 frames + anchor + recent, canvas 384x256):")
    for name, enc in [("wan22 (reference preset)", wan22_vae), ("compact (default)", compact_vae)]:
        print(f"  {name}: window {g(enc(WINDOW_FRAMES))} + 2 x {g(enc(1))} = "
              f"{g(vae_per_sample(enc))} GFLOPs; {enc(1, params=True):,} parameters")
    for task, (views, hh, ww, prompt) in TASKS.items():
        for name, fn in [("qwen3_vl (reference preset)", qwen3_vl),
                         ("compact (default, width 2048)", compact_vlm)]:
            parts, (h, w, patches, tokens, text) = fn(views, hh, ww, prompt)
            print(f"VLM {task} {name}: {views} x {hh}x{ww} -> {h}x{w}, {patches} patches, "
                  f"{tokens} tokens per image, {text} prompt tokens")
            for k, v in parts.items():
                print(f"    {k}: {g(v)} GFLOPs")
            print(f"    total: {g(sum(parts.values()))} GFLOPs")
    print(f"Text encoder per prompt (128 tokens): umT5-xxl shape "
          f"{g(text_encoder(4096, 24, 64, 10240))} GFLOPs, compact "
          f"{g(text_encoder(512, 2, 8, 1024))} GFLOPs")


if __name__ == "__main__":
    main()
