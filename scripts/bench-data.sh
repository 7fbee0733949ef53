# shellcheck shell=bash
# Sourced by scripts/bench.sh and scripts/encoder-bench.sh, not run: the synthetic datasets they
# measure on, each made once and kept for later runs. Run from the source root.

# bench_dataset BIN PRESET EPISODES FRAMES DIR [CODEC]: BIN's `dataset synth` of PRESET (EPISODES
# episodes of FRAMES frames, GOP 2, CODEC: av1 unless given) into DIR, unless DIR already holds a
# dataset (meta/info.json).
bench_dataset() {
  local bin=$1 preset=$2 episodes=$3 frames=$4 dir=$5 codec=${6:-av1}
  [ -f "$dir/meta/info.json" ] && return 0
  "$bin" dataset synth --preset "$preset" --episodes "$episodes" --frames-per-episode "$frames" \
    --gop 2 --codec "$codec" --out "$dir" >/dev/null 2>&1
}

# ladder_data BIN TASK FRAMES [CODEC]: the dataset of TASK's ladder runs. Points $<TASK>_DATA_ROOT
# (exported) at ${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/TASK_ladder (with _CODEC
# appended when CODEC is given) and makes each dataset directory of configs/data/TASK.json: 8
# episodes in all, spread over those directories (LIBERO has 4), of FRAMES frames, in CODEC (av1
# unless given).
ladder_data() {
  local bin=$1 task=$2 frames=$3 codec=${4:-}
  local upper root dirs dir
  upper=$(echo "$task" | tr '[:lower:]' '[:upper:]')
  root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/${task}_ladder${codec:+_$codec}
  export "${upper}_DATA_ROOT=$root"
  dirs=$(python3 -c "import json, os; print(' '.join(os.path.expandvars(d) for d in json.load(open('configs/data/${task}.json'))['sampler']['dataset_dirs']))")
  for dir in $dirs; do
    bench_dataset "$bin" "$task" $((8 / $(echo "$dirs" | wc -w))) "$frames" "$dir" "${codec:-av1}"
  done
}
