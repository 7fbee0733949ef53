#!/usr/bin/env python3
"""Exports a frozen encoder, a PyTorch nn.Module, as an AOTInductor package (.pt2) that
wam-pipeline loads with `"encoder": "aoti", "path": "<package>"` (VaeEncode, VlmEncode, TextEmbed's
text-cache encoder). The package holds the module's weights and Inductor's compiled kernels for
one device and dtype; its inputs keep the dynamic sizes the stages feed (docs/ENCODERS.md,
"Exported encoders"):

  vae   forward(video float [B, 3, T, H, W] in [-1, 1]) -> latent mean [B, 48, (T-1)/4+1, H/16, W/16]
        (B, T = 4k+1, H and W multiples of 16 dynamic; two models in the package: "model" for
        k >= 1 and "single_frame" for T = 1, the memory frames, which a causal VAE encodes on a
        branch that one exported graph cannot hold beside the other)
  vlm   forward(images float [N, 3, h, w] in [0, 1], token_ids int64 [B, L]) -> hidden [B, S, width]
        (N, B, L dynamic; h and w multiples of --image-multiple)
  text  forward(token_ids int64 [N, 128]) -> [N, 128, text_dim] (N dynamic)

  python3 scripts/export_encoder.py vae my_vae.py:build_encoder wan22_vae.pt2 --device cuda

MODULE is FILE.py:NAME, NAME a callable returning the module (a class or a function), called
with the --arg KEY=VALUE pairs as keyword arguments (VALUE an integer, a number or else a
string). After compiling, each model of the package is loaded back and compared with the module
on two input shapes (the example and the one the stage probes with at open); --reference FILE
writes the example inputs and the module's output as safetensors ("input0", "input1", ...,
"output") for a C++ check; --torchscript FILE also saves the same module, weights, device and dtype as
TorchScript (torch.jit.script, checked the same way), so that the two loaders can be timed on one
module (scripts/exported-vae-bench.sh). Needs PyTorch 2.6 or later
(torch._inductor.aoti_compile_and_package), the GPU image's python3.

  python3 scripts/export_encoder.py vae scripts/vae_standin.py:CausalVideoEncoder vae.pt2 \
    --arg width=128 --torchscript vae.pt
"""
import argparse
import contextlib
import ctypes
import importlib.util
import json
import os
import struct
import sys

# PyTorch 2.x's libraries export copies of libstdc++'s std::filesystem (pytorch/pytorch#133437).
# A compiled package loaded after them binds its calls to those copies unless libstdc++ is
# already global: load it so before torch (docs/RELIABILITY.md, "Linking against LibTorch").
with contextlib.suppress(OSError):
    ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)

import torch  # noqa: E402 (after libstdc++, above)


def fail(message):
    print(f"export_encoder: {message}", file=sys.stderr)
    sys.exit(1)


def load_factory(spec):
    path, _, name = spec.rpartition(":")
    if not path or not name:
        fail(f"MODULE {spec!r} is not FILE.py:NAME")
    if not os.path.isfile(path):
        fail(f"{path} does not exist")
    loader_spec = importlib.util.spec_from_file_location("wam_exported_encoder", path)
    module = importlib.util.module_from_spec(loader_spec)
    loader_spec.loader.exec_module(module)
    if not hasattr(module, name):
        fail(f"{path} has no {name}")
    return getattr(module, name)


def programs_for(kind, device, dtype, image_multiple):
    """What the package holds: for each model name, its example inputs, their dynamic sizes, and
    the inputs the stage probes it with at open (stages/models/vae.cc, vlm.cc, text_encoder.cc)."""
    generator = torch.Generator().manual_seed(0)

    def uniform(*shape, low=0.0, high=1.0):
        values = torch.rand(*shape, generator=generator) * (high - low) + low
        return values.to(device, dtype)

    def token_ids(rows, length):
        return torch.randint(2, 258, (rows, length), generator=generator).to(device)

    Dim = torch.export.Dim
    if kind == "vae":
        frames = Dim("latent_frames_after_the_first", min=1, max=64)
        height, width = Dim("height_16", min=2, max=256), Dim("width_16", min=2, max=256)
        batch = Dim("batch", min=1, max=4096)
        return {
            "model": ((uniform(2, 3, 9, 64, 96, low=-1.0),),
                      ({0: batch, 2: 4 * frames + 1, 3: 16 * height, 4: 16 * width},),
                      (uniform(1, 3, 5, 64, 64, low=-1.0),)),
            "single_frame": ((uniform(2, 3, 1, 64, 96, low=-1.0),),
                             ({0: batch, 3: 16 * height, 4: 16 * width},),
                             (uniform(1, 3, 1, 64, 64, low=-1.0),)),
        }
    if kind == "vlm":
        m = image_multiple
        height, width = Dim("height_m", min=2, max=4096 // m), Dim("width_m", min=2, max=4096 // m)
        dynamic = ({0: Dim("images", min=1, max=4096), 2: m * height, 3: m * width},
                   {0: Dim("batch", min=1, max=4096), 1: Dim("tokens", min=2, max=8192)})
        probe_side = -(-112 // m) * m
        return {"model": ((uniform(4, 3, 4 * m, 6 * m), token_ids(2, 12)), dynamic,
                          (uniform(2, 3, probe_side, probe_side), token_ids(1, 8)))}
    dynamic = ({0: Dim("prompts", min=1, max=4096)},)
    return {"model": ((token_ids(3, 128),), dynamic, (token_ids(1, 128),))}


def compile_package(programs, path):
    """Compiles each exported program and packages them under their names, which the stages
    pass to AOTIModelPackageLoader (PyTorch's documented way to put several models in one
    package: aot_compile with aot_inductor.package, then package_aoti)."""
    from torch._inductor.package import package_aoti
    options = {"aot_inductor.package": True}
    # PyTorch assumes no dynamic size is 0 or 1, so the lower bound it bakes into a package's
    # input checks (AOTI_RUNTIME_CHECK_INPUTS=1) is 2 for every dynamic size, and a batch of one
    # is refused although the package computes it right (the probes below run batch 1 against
    # the module). Where the option exists, those lower-bound checks are left out.
    if hasattr(torch._inductor.config.aot_inductor, "check_lowerbound"):
        options["aot_inductor.check_lowerbound"] = False
    files = {}
    for name, program in programs.items():
        args, kwargs = program.example_inputs
        files[name] = torch._inductor.aot_compile(program.module(), args, kwargs, options=options)
    package_aoti(path, files)


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                      torch.int64: "I64"}


def write_safetensors(path, tensors):
    """The safetensors layout (an 8-byte header length, a JSON header, the raw bytes), written
    here so that the check needs no package beyond torch."""
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous().cpu()
        raw = tensor.view(torch.uint8).reshape(-1).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with written_atomically(path, "") as temporary, open(temporary, "wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for blob in blobs:
            out.write(blob)


def max_difference(got, want):
    return (got.float() - want.float()).abs().max().item()


@contextlib.contextmanager
def written_atomically(path, suffix):
    """Yields a temporary path beside `path` (ending in `suffix`), renamed to `path` when the block
    ends normally and removed when it does not (sys.exit from fail() included)."""
    temporary = f"{path}.tmp.{os.getpid()}{suffix}"
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def keyword_arguments(pairs):
    """--arg KEY=VALUE pairs as keyword arguments: VALUE as an int, else a float, else a str."""
    kwargs = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            fail(f"--arg {pair!r} is not KEY=VALUE with KEY a Python name")
        for convert in (int, float, str):
            try:
                kwargs[key] = convert(text)
                break
            except ValueError:
                continue
    return kwargs


def check_against_module(what, module, exported, example, probe):
    """Runs `exported` and `module` on the example and probe inputs; fails on another shape."""
    for name, inputs in (("example", example), ("probe", probe)):
        want, got = module(*inputs), exported(*inputs)
        shapes = ", ".join(str(list(t.shape)) for t in inputs)
        print(f"export_encoder: {name} inputs {shapes} -> {list(want.shape)}, {what} and "
              f"module differ by at most {max_difference(got, want):.3g}")
        if got.shape != want.shape:
            fail(f"the {what} returned {list(got.shape)} where the module returns "
                 f"{list(want.shape)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["vae", "vlm", "text"])
    parser.add_argument("module", help="FILE.py:NAME, NAME(**args) returning the nn.Module")
    parser.add_argument("out", help="the package to write (.pt2)")
    parser.add_argument("--device", default="cuda", help="where the package runs (cuda, cpu)")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="the encoder's precision (default: bfloat16 on CUDA, float32 on "
                             "the CPU, as the stages' dtype auto)")
    parser.add_argument("--image-multiple", type=int, default=28,
                        help="vlm: image sides are multiples of this (patch x merge; 28 for "
                             "Qwen-VL)")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword argument for NAME (repeatable)")
    parser.add_argument("--reference", help="also write the example inputs and the module's "
                                            "output here (safetensors)")
    parser.add_argument("--torchscript", metavar="FILE",
                        help="also save the module as TorchScript here (torch.jit.script)")
    args = parser.parse_args()
    try:
        importlib.import_module("torch._inductor")  # not imported by `import torch`
    except ImportError:
        pass
    if not hasattr(getattr(torch, "_inductor", None), "aoti_compile_and_package"):
        fail(f"PyTorch {torch.__version__} has no torch._inductor.aoti_compile_and_package "
             "(2.6 or later needed)")
    device = torch.device(args.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(
        args.dtype, torch.bfloat16 if device.type == "cuda" else torch.float32)

    module = load_factory(args.module)(**keyword_arguments(args.arg))
    if not isinstance(module, torch.nn.Module):
        fail(f"{args.module} returned {type(module).__name__}, not a torch.nn.Module")
    module = module.to(device, dtype).eval().requires_grad_(False)
    models = programs_for(args.kind, device, dtype, args.image_multiple)
    example, _, _ = models["model"]

    with torch.no_grad():
        programs = {}
        for name, (inputs, dynamic, _) in models.items():
            try:
                programs[name] = torch.export.export(module, inputs, dynamic_shapes=dynamic)
            except Exception as error:  # export's errors name the op and the constraint
                shapes = ", ".join(str(list(t.shape)) for t in inputs)
                fail(f"torch.export of {args.module} on inputs {shapes} ({name}) failed: {error}")
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        # Each file is written beside its target and renamed once checked: a failed or
        # interrupted export leaves neither a file nor a temporary behind.
        with written_atomically(args.out, ".pt2") as temporary:
            compile_package(programs, temporary)
            from torch._inductor.package import load_package
            for name, (inputs, _, probe) in models.items():
                check_against_module(f"package's {name}", module, load_package(temporary, name),
                                     inputs, probe)
        if args.torchscript:
            scripted = torch.jit.script(module)
            for name, (inputs, _, probe) in models.items():
                check_against_module("TorchScript module", module, scripted, inputs, probe)
            with written_atomically(args.torchscript, ".pt") as temporary:
                torch.jit.save(scripted, temporary)
            print(f"export_encoder: wrote {args.torchscript} (TorchScript, same weights)")
        if args.reference:
            tensors = {f"input{i}": t for i, t in enumerate(example)}
            tensors["output"] = module(*example)
            write_safetensors(args.reference, tensors)
    print(f"export_encoder: wrote {args.out} ({args.kind}, {device}, {str(dtype)[6:]})")


if __name__ == "__main__":
    main()
