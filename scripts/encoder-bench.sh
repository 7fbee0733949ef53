#!/usr/bin/env bash
# Time per batch of the frozen encoders on a CUDA machine (issue 23): VaeEncode and VlmEncode of
# the baseline graph, base model preset, batch 16, LIBERO and RoboTwin shapes, with today's
# default stand-ins (configs/encoders/builtin.json) and the reference-cost ones
# (configs/encoders/reference.json; docs/ENCODERS.md gives their FLOPs per sample).
#   scripts/encoder-bench.sh            (after scripts/build.sh; WAM_BUILD_DIR picks the build)
# Each figure is `wam-pipeline bench --device-only`'s "ms per batch" of the vae and vlm nodes
# (the device part alone, in bf16, as the ladder's baseline runs them). The text-cache build of
# the reference preset runs its umT5-xxl-shaped text encoder on the CPU: a few minutes.
# The whole ladder with the reference-cost encoders:
#   WAM_ENCODERS=configs/encoders/reference.json scripts/bench.sh ladder
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WAM_BUILD_DIR:-build}
bin=$build/wam-pipeline
steps=${WAM_ENCODER_BENCH_STEPS:-20}
# shellcheck source=scripts/bench-data.sh
. scripts/bench-data.sh

echo "# $(date -u +%F): frozen encoders, ms per batch (base preset, batch 16, $steps steps)"
for task in ${WAM_ENCODER_BENCH_TASKS:-libero robotwin}; do
  ladder_data "$bin" "$task" 128
  for encoders in builtin reference; do
    args=(--set include.model=configs/model/base.json --set settings.epochs=1000
          --set settings.batch_size=16 --set "include.encoders=configs/encoders/$encoders.json")
    "$bin" text-cache build "pipelines/${task}_baseline.json" "${args[@]}" >/dev/null
    echo "## $task, $encoders encoders"
    "$bin" bench "pipelines/${task}_baseline.json" "${args[@]}" --device-only \
      --steps "$steps" --warmup 3 2>/dev/null | grep -E "samples/s|^ +(vae|vlm|step):" |
      sed 's/^ */  /'
  done
done
