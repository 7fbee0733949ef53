#!/usr/bin/env bash
# One VAE module loaded as TorchScript and as an AOTInductor package, on a CUDA machine (issue
# 23's target: the package at least as fast on the same weights and batch). For each width of
# $WAM_EXPORTED_VAE_WIDTHS (default "32 128"), scripts/vae_standin.py's encoder (the built-in
# stand-in's structure) is exported once by scripts/export_encoder.py, bf16 on CUDA, with
# --torchscript beside the package; then VaeEncode's ms per batch from `wam-pipeline bench
# --device-only` of the LIBERO baseline graph (base preset, batch 16), the two files alternating,
# $WAM_EXPORTED_VAE_ROUNDS rounds (default 3), and the built-in stand-in of that width once.
#   scripts/exported-vae-bench.sh        (after scripts/build.sh; WAM_BUILD_DIR picks the build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WAM_BUILD_DIR:-build}
bin=$build/wam-pipeline
work=${WAM_EXPORTED_VAE_DIR:-${TMPDIR:-/tmp}/wam-exported-vae}
mkdir -p "$work"
# shellcheck source=scripts/bench-data.sh
. scripts/bench-data.sh
ladder_data "$bin" libero 128
base=(--set include.model=configs/model/base.json --set settings.epochs=1000
      --set settings.batch_size=16)
"$bin" text-cache build pipelines/libero_baseline.json "${base[@]}" >/dev/null
# VaeEncode's "ms per batch" from one bench with the encoders of the JSON file $1; a failed bench
# prints the end of its output (kept in $work/bench.log) less the stack frames that hide the
# message, and stops the script. AOTI_RUNTIME_CHECK_INPUTS makes a package name an input whose
# shape, stride or dtype differs from what it was exported for, instead of failing inside a kernel;
# only where the package leaves out the lower bounds that refuse a batch of one
# (scripts/export_encoder.py, compile_package).
check_inputs=()
if python3 -c "import torch._inductor.config as c
assert hasattr(c.aot_inductor, 'check_lowerbound')" 2>/dev/null; then
  check_inputs=(AOTI_RUNTIME_CHECK_INPUTS=1)
fi
vae_ms() {
  if ! env "${check_inputs[@]}" "$bin" bench pipelines/libero_baseline.json "${base[@]}" --set "include.encoders=$1" \
    --device-only --steps "${WAM_EXPORTED_VAE_STEPS:-10}" --warmup 3 >"$work/bench.log" 2>&1; then
    { echo "exported-vae-bench: the bench with $1 failed:"; grep -v '^frame #' "$work/bench.log" | tail -30; } >&2
    return 1
  fi
  sed -n 's/^ *vae: *\([0-9.]*\) ms per batch.*/\1/p' "$work/bench.log" | head -1
}
encoders() {  # FILE VAE_PARAMS_JSON: an encoders include with those VaeEncode params
  printf '{"vae": %s, "vlm": {}, "text": {}}\n' "$2" >"$1"
}
echo "# $(date -u +%F): VaeEncode ms per batch, one module as TorchScript and as AOTInductor" \
  "(${check_inputs[*]:-no AOTI input checks})"
echo "| width | round | TorchScript | AOTInductor | TorchScript / AOTInductor |"
echo "|--:|--:|--:|--:|--:|"
for width in ${WAM_EXPORTED_VAE_WIDTHS:-32 128}; do
  python3 scripts/export_encoder.py vae scripts/vae_standin.py:CausalVideoEncoder \
    "$work/vae$width.pt2" --device cuda --dtype bfloat16 --arg "width=$width" \
    --torchscript "$work/vae$width.pt" >"$work/export$width.log" 2>&1 ||
    { tail -20 "$work/export$width.log"; exit 1; }
  encoders "$work/ts$width.json" "{\"encoder\": \"torchscript\", \"path\": \"$work/vae$width.pt\"}"
  encoders "$work/aoti$width.json" "{\"encoder\": \"aoti\", \"path\": \"$work/vae$width.pt2\"}"
  encoders "$work/builtin$width.json" "{\"width\": $width}"
  for round in $(seq "${WAM_EXPORTED_VAE_ROUNDS:-3}"); do
    ts=$(vae_ms "$work/ts$width.json") || exit 1
    aoti=$(vae_ms "$work/aoti$width.json") || exit 1
    ratio=$(python3 -c "print(f'{$ts / $aoti:.2f}x')" 2>/dev/null || echo "?")
    echo "| $width | $round | ${ts:-?} | ${aoti:-?} | $ratio |"
  done
  echo "built-in stand-in, width $width: $(vae_ms "$work/builtin$width.json") ms per batch"
done
