#!/usr/bin/env bash
# The compiled step of this tree against another source tree, side by side in one call on one GPU
# (docs/BENCHMARKS.md, "Compiled step"): builds wam-pipeline from both, prepares the synthetic
# RoboTwin dataset, the text cache and the TunableOp results once, then times
# `wam-pipeline bench --device-only` (base preset, batch 16) of each build, alternating, for each
# memory setting, and profiles this tree's step (its kernels grouped by name, longest first).
# Where python3 has PyTorch with torch.compile, each round also times the PyTorch peer of the step
# (scripts/peer_step.py: the same model and step, each MoT layer compiled by Inductor) at the same
# settings, as the "peer" rows of the same table (WAM_STEP_BENCH_NO_PEER=1 skips it).
#   source .gpu/gpu-env.sh && source .gpu-extra/env.sh && scripts/step-bench.sh [BEFORE_DIR...]
# BEFORE_DIR: a source tree, e.g. `git archive PARENT | tar -x -C DIR`, its rows named after the
# folder (.dbg/before: "before"); several are timed in the order given, then this tree ("after");
# without one only this tree is timed. WAM_STEP_BENCH_ROUNDS (default 2) rounds; WAM_STEP_BENCH_ROWS picks rows by name
# (default "shipped recompute"; also "fp8" and "fp8-recompute": TrainStep's precision "fp8", no
# peer; "uncaptured": cuda_graph off, the kernels launched op by op); WAM_STEP_BENCH_PROFILE names
# the rows whose step is profiled (default "shipped"; the "uncaptured" row's profile also sums the
# kernels by the op and input shapes that launched them);
# WAM_STEP_BENCH_LOSS_STEPS=N also trains this tree N steps with bf16 and with fp8 products on the
# same data (`wam-pipeline run`, a loss logged every step) and plots both (scripts/loss_plot.py).
# Logs, the trace summaries and the plot go to ${OUT:-/tmp/step-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/step-bench}
mkdir -p "$out"
after_build=${WAM_BUILD_DIR:-/tmp/build-gpu}
build_pipeline() {  # SOURCE BUILD
  # Configured every time (seconds when nothing changed), so the log says which kernels it has.
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$2.configure.log" 2>&1 ||
    { tail -20 "$2.configure.log"; return 1; }
  grep "fused CUDA kernels" "$2.configure.log" | sed "s|^-- |$1: |" || true
  cmake --build "$2" -j "$(nproc)" --target wam-pipeline >"$2.build.log" 2>&1 ||
    { grep -E "error" "$2.build.log" | head -30; return 1; }
}
began=$SECONDS
build_pipeline . "$after_build"
builds=("after|$after_build/wam-pipeline")
earlier=()
for dir in "$@"; do
  name=$(basename "$dir")
  build_pipeline "$dir" "/tmp/build-$name"
  earlier+=("$name|/tmp/build-$name/wam-pipeline")
done
builds=("${earlier[@]}" "${builds[@]}")
echo "built in $((SECONDS - began)) s"
bin=$after_build/wam-pipeline
root=${WAM_BENCH_ROOT:-/tmp/wam-bench}/robotwin_gpu
export WAM_CACHE_ROOT=${WAM_CACHE_ROOT:-/tmp/wam-bench/cache}
if [ ! -f "$root/meta/info.json" ]; then
  "$bin" dataset synth --preset robotwin --episodes 8 --frames-per-episode 128 --gop 2 \
    --codec av1 --out "$root" >/dev/null 2>&1
fi
export ROBOTWIN_DATA_ROOT=$root
base=(--set include.model=configs/model/base.json --set settings.epochs=1000)
"$bin" text-cache build pipelines/robotwin_online.json "${base[@]}" >/dev/null 2>&1
"$bin" compile pipelines/robotwin_compile.json "${base[@]}" --steps 3 >/dev/null 2>&1
# name | extra arguments | the peer's --recompute: as shipped (memory_budget 0.5) no group is
# recomputed on the H200; memory_budget=0 recomputes every group of 3 layers.
rows=(
  "shipped||0"
  "fp8|--set nodes.step.params.precision=fp8|"
  "recompute|--set nodes.step.params.memory_budget=0|3"
  "fp8-recompute|--set nodes.step.params.precision=fp8 --set nodes.step.params.memory_budget=0|"
  "uncaptured|--set nodes.step.params.cuda_graph=false|"
)
peer=""
if [ "${WAM_STEP_BENCH_NO_PEER:-0}" = 0 ] &&
  python3 -c "import torch; torch.compile" 2>/dev/null; then
  peer=1
fi
wanted=" ${WAM_STEP_BENCH_ROWS:-shipped recompute} "
for round in $(seq "${WAM_STEP_BENCH_ROUNDS:-2}"); do
  for spec in "${rows[@]}"; do
    IFS='|' read -r name extra peer_recompute <<<"$spec"
    [[ "$wanted" == *" $name "* ]] || continue
    for b in "${builds[@]}"; do
      IFS='|' read -r which binary <<<"$b"
      log="$out/bench_${name}_${which}_$round.txt"
      # shellcheck disable=SC2086  # extra holds several arguments
      "$binary" bench pipelines/robotwin_compile.json "${base[@]}" $extra --device-only \
        --steps 12 --warmup 4 >"$log" 2>&1 || { tail -5 "$log"; continue; }
      step=$(sed -n 's/^ *step: *\([0-9.]*\) ms per batch.*/\1/p' "$log" | head -1)
      peak=$(sed -n 's/.*peak device memory \(.*\)$/\1/p' "$log" | head -1)
      echo "round $round  $name  $which: step ${step:-?} ms, peak $peak"
    done
    if [ -n "$peer" ] && [ -n "$peer_recompute" ]; then
      log="$out/bench_${name}_peer_$round.txt"
      python3 scripts/peer_step.py --model configs/model/base.json --batch 16 \
        --recompute "$peer_recompute" --json "$out/peer_${name}_$round.json" >"$log" 2>&1 ||
        { tail -5 "$log"; continue; }
      pattern='s/^peer step: \([0-9.]*\) ms per batch, peak \(.* GiB\), .*/\1 ms, peak \2/p'
      figures=$(sed -n "$pattern" "$log")
      echo "round $round  $name  peer: step ${figures:-?}"
    fi
  done
done
profile_row() {  # NAME EXTRA: this tree's step at a row's settings, its kernels by name
  local name=$1 extra=$2
  # shellcheck disable=SC2086  # extra holds several arguments
  "$bin" bench pipelines/robotwin_compile.json "${base[@]}" $extra --device-only --steps 3 \
    --warmup 4 --profile --trace "$out/trace.json" >"$out/profile_$name.txt" 2>&1 ||
    tail -5 "$out/profile_$name.txt"
  python3 - "$out/trace.json" >"$out/kernels_$name.txt" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
total, calls = collections.Counter(), collections.Counter()
for e in events:
    if e.get("cat") == "kernel":
        total[e["name"][:110]] += e.get("dur", 0) / 1000.0
        calls[e["name"][:110]] += 1
steps = 3
print(f"kernels: {sum(total.values()) / steps:.2f} ms per step")
for name, ms in total.most_common(45):
    print(f"{ms / steps:8.2f} ms {calls[name] // steps:6d} calls  {name}")
# Without the CUDA graph (the "uncaptured" row) each kernel's "External id" is that of the op
# that launched it: the kernels' time by op and input shapes.
ops = {e["args"]["External id"]: e for e in events
       if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
by_op, op_calls = collections.Counter(), collections.Counter()
for e in events:
    if e.get("cat") != "kernel":
        continue
    op = ops.get(e.get("args", {}).get("External id"))
    if op is not None:
        key = f'{op["name"]} {op["args"].get("Input Dims", "")}'[:160]
        by_op[key] += e.get("dur", 0) / 1000.0
        op_calls[key] += 1
if by_op:
    print(f"kernels by the op that launched them: {sum(by_op.values()) / steps:.2f} ms per step")
    for key, ms in by_op.most_common(60):
        print(f"{ms / steps:8.2f} ms {op_calls[key] // steps:6d} calls  {key}")
PY
  # Launched op by op, each kernel also by its op's enclosing autograd node and input dtypes.
  # The elementwise kernels apart: many small ones, each launched by a different op.
  if [ "$name" = uncaptured ]; then
    python3 scripts/kernel-ops.py "$out/trace.json" --top 60 >"$out/kernel_ops_$name.txt"
    python3 scripts/kernel-ops.py "$out/trace.json" --top 40 --match elementwise \
      >"$out/kernel_ops_elementwise_$name.txt"
  fi
  rm -f "$out/trace.json"
  echo "## kernels, $name"
  head -50 "$out/kernels_$name.txt"
}
if [ -z "${WAM_STEP_BENCH_NO_PROFILE:-}" ]; then
  for spec in "${rows[@]}"; do
    IFS='|' read -r name extra _ <<<"$spec"
    [[ " ${WAM_STEP_BENCH_PROFILE:-shipped} " == *" $name "* ]] && profile_row "$name" "$extra"
  done
fi
if [ -n "${WAM_STEP_BENCH_LOSS_STEPS:-}" ]; then
  runs=()
  for precision in bf16 fp8; do
    "$bin" run pipelines/robotwin_compile.json "${base[@]}" --steps "$WAM_STEP_BENCH_LOSS_STEPS" \
      --set nodes.step.params.precision=$precision --set nodes.step.params.log_every=1 \
      --set 'nodes.step.params.checkpoint_dir=""' >"$out/loss_$precision.log" 2>&1 ||
      { tail -5 "$out/loss_$precision.log"; continue; }
    runs+=("$precision=$out/loss_$precision.log")
  done
  python3 scripts/loss_plot.py "$out/fp8_loss.svg" \
    "Base preset, batch 16, RoboTwin: bf16 and fp8 products, same data and noise" "${runs[@]}"
fi
