#!/usr/bin/env bash
# scripts/export_encoder.py against the stages: exports the small encoders of tiny_encoders.py as
# AOTInductor packages on the CPU, then wam_export_encoder_check loads each the way the stages do
# (the VAE through VaeEncode) and compares with the Python module's outputs. Needs a python3 with
# PyTorch 2.6 or later and a LibTorch that loads packages (the GPU image); skipped (77) elsewhere,
# saying which is missing. Usage: export_encoder_test.sh WAM_EXPORT_ENCODER_CHECK (from the source
# root).
set -uo pipefail
check=$1
py=python3
if ! "$py" -c "import torch._inductor as i; i.aoti_compile_and_package" 2>/dev/null; then
  echo "skipped: python3 has no PyTorch 2.6+ with torch._inductor.aoti_compile_and_package"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$("$check" --supported)" != yes ]; then
  echo "skipped: this build's LibTorch cannot load AOTInductor packages"
  exit 77
fi
failures=0
# The VAE also as TorchScript from the same module (--torchscript), loaded as the stages load it.
for spec in "vae TinyVae --torchscript $work/vae.pt" "text TinyText"; do
  read -r kind name extra <<<"$spec"
  # shellcheck disable=SC2086  # extra holds an option and its value, or nothing
  if "$py" scripts/export_encoder.py "$kind" "tests/scripts/tiny_encoders.py:$name" \
    "$work/$kind.pt2" --device cpu --reference "$work/$kind.safetensors" $extra \
    >"$work/$kind.log" 2>&1 &&
    "$check" "$kind" "$work/$kind.pt2" "$work/$kind.safetensors" >>"$work/$kind.log" 2>&1; then
    echo "ok   $kind: the package loaded by the stages equals the Python module"
  else
    echo "FAIL $kind"
    failures=$((failures + 1))
  fi
  cat "$work/$kind.log"
done
if "$check" vae "$work/vae.pt" "$work/vae.safetensors" torchscript >"$work/ts.log" 2>&1; then
  echo "ok   vae: its TorchScript export loaded by the stages equals the Python module"
else
  echo "FAIL vae as TorchScript"
  failures=$((failures + 1))
fi
cat "$work/ts.log"
# A VAE package of one model, the several-frame graph alone, is refused at open: its graph would
# run the several-frame branch on the one-frame memory videos (docs/ENCODERS.md).
if "$py" - "$work/vae_one_model.pt2" >"$work/one.log" 2>&1 <<'PY'
import ctypes, sys
ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)  # as scripts/export_encoder.py does
import torch
sys.path.insert(0, "tests/scripts")
from tiny_encoders import TinyVae
frames = torch.export.Dim("frames", min=1, max=64)
with torch.no_grad():
    program = torch.export.export(TinyVae().eval(), (torch.rand(2, 3, 9, 64, 96),),
                                  dynamic_shapes=({2: 4 * frames + 1},))
    torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[1])
PY
then
  "$check" vae "$work/vae_one_model.pt2" "$work/vae.safetensors" >>"$work/one.log" 2>&1
fi
if grep -q "AOTInductor package $work/vae_one_model.pt2 has no model \"single_frame\" for one-frame videos (the memory frames): export it again with scripts/export_encoder.py" \
  "$work/one.log"; then
  echo "ok   a VAE package without its one-frame model is refused saying to export it again"
else
  echo "FAIL a VAE package of one model; the check said:"
  cat "$work/one.log"
  failures=$((failures + 1))
fi
# A package that is not one is refused naming the file.
echo "not a package" >"$work/bad.pt2"
"$check" vae "$work/bad.pt2" "$work/vae.safetensors" >"$work/bad.log" 2>&1
if grep -q "export_encoder_check: cannot load AOTInductor package $work/bad.pt2: not a zip archive" \
  "$work/bad.log"; then
  echo "ok   a damaged package is refused naming it"
else
  echo "FAIL a damaged package; the check said:"
  cat "$work/bad.log"
  failures=$((failures + 1))
fi
exit $((failures > 0))
