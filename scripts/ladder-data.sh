# shellcheck shell=bash
# Sourced by scripts/bench.sh (ladder) and scripts/encoder-bench.sh, not run: the synthetic
# dataset of a task's ladder runs, made once and shared by both.
#
# ladder_data BIN TASK FRAMES: points $<TASK>_DATA_ROOT (exported) at
# ${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/TASK_ladder and synthesises, with BIN's
# `dataset synth`, each dataset directory of configs/data/TASK.json that has no meta/info.json
# yet: 8 episodes in all, spread over those directories (LIBERO has 4), of FRAMES frames, GOP 2,
# AV1. Run from the source root.
ladder_data() {
  local bin=$1 task=$2 frames=$3
  local upper root dirs dir
  upper=$(echo "$task" | tr '[:lower:]' '[:upper:]')
  root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/${task}_ladder
  export "${upper}_DATA_ROOT=$root"
  dirs=$(python3 -c "import json, os; print(' '.join(os.path.expandvars(d) for d in json.load(open('configs/data/${task}.json'))['sampler']['dataset_dirs']))")
  for dir in $dirs; do
    [ -f "$dir/meta/info.json" ] && continue
    "$bin" dataset synth --preset "$task" --episodes $((8 / $(echo "$dirs" | wc -w))) \
      --frames-per-episode "$frames" --gop 2 --codec av1 --out "$dir" >/dev/null 2>&1
  done
}
