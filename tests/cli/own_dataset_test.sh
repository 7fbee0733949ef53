#!/usr/bin/env bash
# The README's "On a LeRobot dataset of your own" followed as written: its first ```sh block, run
# line by line on the GR00T demo in ../shared/data (the one placeholder, the dataset path,
# replaced), and what each command should show. Exit 77 (ctest: skipped) without the demo.
# Usage: own_dataset_test.sh WAM_PIPELINE_BINARY (run from the source root)
set -uo pipefail
bin=$1
gr00t_root=$PWD/../shared/data/lerobot-gr00t-picknplace
if [ ! -d "$gr00t_root" ]; then
  echo "skip: $gr00t_root (the GR00T demo of ../shared/data) is not present"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export WAM_CACHE_ROOT=$work/cache WAM_OUTPUT_ROOT=$work/runs WAM_LATENT_CACHE=$work/latents
failures=0
fail() { echo "FAIL $1"; [ -f "$work/out" ] && cat "$work/out"; failures=$((failures + 1)); }

# The section's first shell block, fences excluded.
awk '/^### On a LeRobot dataset of your own$/ {on = 1; next}
     on && /^```sh$/ {block = 1; next}
     block && /^```$/ {exit}
     block {print}' README.md >"$work/block.sh"
placeholder=/path/to/lerobot-gr00t-picknplace
grep -qF "$placeholder" "$work/block.sh" || fail "the README's block sets GR00T_DATA_ROOT to $placeholder"

wam-pipeline() { "$bin" "$@"; }
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$((n + 1))
  eval "${line//$placeholder/$gr00t_root}" >"$work/out.$n" 2>&1
  status=$?
  cp "$work/out.$n" "$work/out"
  if [ "$status" -ne 0 ]; then fail "line $n, exit $status: $line"; else echo "ok   line $n: $line"; fi
done <"$work/block.sh"

# What each command shows, found by its text (the Nth non-empty line of the block wrote out.N).
output_of() {
  echo "$work/out.$(grep -v '^$' "$work/block.sh" | grep -nF -- "$1" | head -1 | cut -d: -f1)"
}
expect() {  # expect COMMAND_TEXT OUTPUT_TEXT: the output of the block's command has OUTPUT_TEXT
  local out
  out=$(output_of "$1")
  cp "$out" "$work/out" 2>/dev/null || : >"$work/out"
  if grep -qF -- "$2" "$work/out"; then
    echo "ok   $1: $(grep -F -m1 -- "$2" "$work/out")"
  else
    fail "$1: lacks $2"
  fi
}
expect "wam-pipeline dataset inspect" \
  "  observation.images.ego_view: h264 256x256, 2096 frames in 5 videos"
expect "wam-pipeline validate" "ok: pipelines/libero_online.json (libero_online, 9 nodes, data checked)"
expect "wam-pipeline validate" "ok: pipelines/libero_cache.json (libero_cache, 9 nodes, data checked)"
expect "wam-pipeline text-cache build" \
  "wrote $WAM_CACHE_ROOT/text_embed/gr00t_picknplace.h5: 6 prompts, 6 encoded, 0 entries kept"
expect "wam-pipeline run pipelines/libero_online.json" \
  "[sampler] EpisodeSampler: 5 episodes, 2096 frames; 2096 samples per epoch for rank 0/1"
expect "wam-pipeline run pipelines/libero_online.json" \
  "[step] TrainStep: 240160 parameters on "  # the tiny model, on the CPU or a CUDA device
expect "wam-pipeline run pipelines/libero_online.json" \
  "[step] TrainStep: saved $WAM_OUTPUT_ROOT/libero_online/checkpoints/step_3.safetensors"
expect "wam-pipeline run pipelines/libero_online.json" "pipeline libero_online:"  # the run's summary
expect "wam-pipeline run pipelines/libero_online.json" "3 steps; loss first "
rm -f "$work/out"
[ -f "$WAM_OUTPUT_ROOT/libero_online/checkpoints/step_3.safetensors" ] ||
  fail "no checkpoint $WAM_OUTPUT_ROOT/libero_online/checkpoints/step_3.safetensors"

echo "$failures failed"
[ "$failures" -eq 0 ]
