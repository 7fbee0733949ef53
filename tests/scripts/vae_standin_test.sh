#!/usr/bin/env bash
# scripts/vae_standin.py is the built-in VAE stand-in: its weights, saved as safetensors by name
# and given to VaeEncode's built-in stand-in as `weights`, make the C++ stand-in return the Python
# module's latents (wam_export_encoder_check ... builtin), at two widths and video sizes; and the
# module scripts (torch.jit.script) to the same output, as export_encoder.py --torchscript needs.
# Runs Debian's PyTorch 1.13 (/usr/bin/python3, python3-torch from scripts/setup.sh), or the
# PATH's python3 where that has none. Usage: vae_standin_test.sh WAM_EXPORT_ENCODER_CHECK (from
# the source root)
set -uo pipefail
check=$1
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || py=python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "FAIL neither /usr/bin/python3 nor python3 has torch (scripts/setup.sh: python3-torch)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
for spec in "8 9 64 96" "16 5 32 48"; do
  read -r width frames height side <<<"$spec"
  if "$py" - "$work" "$width" "$frames" "$height" "$side" >"$work/py.log" 2>&1 <<'PY'
import sys
sys.path[:0] = ["scripts"]
import torch
import export_encoder
import vae_standin

work, width, frames, height, side = sys.argv[1], *map(int, sys.argv[2:])
module = vae_standin.CausalVideoEncoder(width, seed=width).eval().requires_grad_(False)
video = torch.rand(2, 3, frames, height, side, generator=torch.Generator().manual_seed(5)) * 2 - 1
with torch.no_grad():
    latents = module(video)
    scripted = torch.jit.script(module)(video)
want = [2, 48, (frames - 1) // 4 + 1, height // 16, side // 16]
assert list(latents.shape) == want, (list(latents.shape), want)
assert torch.equal(scripted, latents), "the scripted module differs"
export_encoder.write_safetensors(f"{work}/weights.safetensors", dict(module.named_parameters()))
export_encoder.write_safetensors(f"{work}/reference.safetensors",
                                 {"input0": video, "output": latents})
print(f"python: width {width}, {list(video.shape)} -> {list(latents.shape)}")
PY
  then
    cat "$work/py.log"
    if "$check" vae "$work/weights.safetensors" "$work/reference.safetensors" builtin; then
      echo "ok   width $width: the C++ stand-in with the Python module's weights gives its latents"
    else
      echo "FAIL width $width: the C++ stand-in differs from the Python module"
      failures=$((failures + 1))
    fi
  else
    cat "$work/py.log"
    echo "FAIL width $width: the Python module"
    failures=$((failures + 1))
  fi
done
exit $((failures > 0))
