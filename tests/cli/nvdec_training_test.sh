#!/usr/bin/env bash
# On a GPU with NVDEC: robotwin_compile (tiny model preset) trains with VideoDecode on NVDEC, the
# frames kept in GPU memory and Augment there, while TrainStep captures its step as a CUDA graph
# beside the decoders (stages/common/capture_gate.h): the run ends with every step done, finite
# losses, no sample skipped, and the decoding done on NVDEC; the same with decoder auto, whose
# NVDEC device must be made before LibTorch makes the GPU's context (a device made after it was
# refused: docs/BENCHMARKS.md, "cpu_first: the CPU first, NVDEC beyond it"). Exit 77 (ctest:
# skipped) where validate refuses NVDEC or device frames (no CUDA or no NVIDIA decoder).
# Usage: nvdec_training_test.sh WAM_PIPELINE_BINARY (run from the source root)
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export WAM_CACHE_ROOT=$work/cache WAM_OUTPUT_ROOT=$work/runs ROBOTWIN_DATA_ROOT=$work/robotwin
pipeline=pipelines/robotwin_compile.json
on_gpu=(--set include.model=configs/model/tiny.json --set nodes.decode.params.decoder=nvdec
  --set nodes.decode.params.device_frames=true --set nodes.decode.params.planes_size=[]
  --set nodes.augment.params.planes_from_decode=false)
steps=6

"$bin" dataset synth --preset robotwin --episodes 2 --frames-per-episode 40 --codec h264 --gop 2 \
  --size 80x64 --out "$ROBOTWIN_DATA_ROOT" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
if ! "$bin" validate "$pipeline" "${on_gpu[@]}" >"$work/out" 2>&1; then
  if grep -q -e "needs NVIDIA's hardware decoder" -e "needs a CUDA device" "$work/out"; then
    echo "skip: $(head -1 "$work/out")"
    exit 77
  fi
  cat "$work/out"
  exit 1
fi
"$bin" text-cache build "$pipeline" "${on_gpu[@]}" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
failures=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
for decoder in nvdec auto; do
  rm -f "$work/stats.json"
  "$bin" run "$pipeline" "${on_gpu[@]}" --set "nodes.decode.params.decoder=$decoder" \
    --steps "$steps" --set settings.batch_size=4 \
    --set nodes.step.params.log_every=1 --stats-out "$work/stats.json" >"$work/out" 2>&1
  status=$?
  echo "decoder $decoder:"
  [ "$status" -eq 0 ] || fail "the run exited $status"
  grep -qF "frames kept in GPU memory" "$work/out" || fail "VideoDecode did not keep its frames in GPU memory"
  grep -qF "captured once as a CUDA graph" "$work/out" || fail "TrainStep did not capture its step"
  losses=$(grep -o "step=[0-9]*/$steps loss=[^ ]*" "$work/out")
  [ "$(echo "$losses" | grep -c .)" -eq "$steps" ] || fail "expected $steps logged steps, got: $losses"
  echo "$losses" | grep -qi "nan\|inf" && fail "a loss is not finite: $losses"
  if [ -f "$work/stats.json" ]; then
    python3 - "$work/stats.json" "$steps" <<'PY' || failures=$((failures + 1))
import json, sys
nodes = {n["id"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
decode, step = nodes["decode"], nodes["step"]
problems = []
if decode["skips"] or decode["errors"]:
    problems.append(f"decode skipped {decode['skips']} and failed {decode['errors']} samples")
if decode["counters"].get("nvdec_readers_opened", 0) == 0:
    problems.append(f"no reader decoded on NVDEC: {decode['counters']}")
if step["in"] != int(sys.argv[2]):
    problems.append(f"the step took {step['in']} batches, not {sys.argv[2]}")
for p in problems:
    print("FAIL " + p)
sys.exit(1 if problems else 0)
PY
  else
    fail "no stats written"
  fi
  if [ "$failures" -gt 0 ]; then
    cat "$work/out"
    exit 1
  fi
  echo "ok: $steps steps on NVDEC device frames with the step captured: $(echo "$losses" | tr '\n' ' ')"
done
