#!/usr/bin/env bash
# Benchmarks, measured side by side in one run on this machine; paste the output into
# docs/BENCHMARKS.md with this command line.
#   scripts/bench.sh [runner] [data]
# runner: the runner's own overhead (5 trivial stages, Google Benchmark).
# data:   data-path samples/s, sparse vs full decode, on one synthetic RoboTwin dataset (GOP 2, AV1),
#         with all cores and with one thread (samples/s per core).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
build=${WAM_BUILD_DIR:-build}
bin=$build/wam-pipeline
what=("${@:-runner data}")
what=(${what[@]})

echo "# $(date -u +%F) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

for item in "${what[@]}"; do
  case "$item" in
    runner)
      "$build/tests/bench/wam_bench_runner" --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "^BM_|Benchmark"
      ;;
    data)
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_gop2
      if [ ! -f "$root/meta/info.json" ]; then
        "$bin" dataset synth --preset robotwin --episodes 6 --frames-per-episode 150 --gop 2 \
          --codec av1 --out "$root" >/dev/null
      fi
      steps=${WAM_BENCH_STEPS:-12}
      printf '%-10s %-8s %10s %12s\n' mode threads samples/s "decode busy"
      declare -A rate
      for threads in 0 1; do
        for mode in full sparse; do
          stats=$(mktemp)
          profile=$([ "$mode" = full ] && echo baseline || echo online)
          ROBOTWIN_DATA_ROOT=$root "$bin" run "pipelines/robotwin_data_$profile.json" \
            --steps "$steps" --threads "$threads" --report-every 0 --stats-out "$stats" \
            --set settings.seed=7 >/dev/null 2>&1
          line=$(python3 - "$stats" "$mode" "$threads" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
nodes = {n["id"]: n for n in stats["nodes"]}
rate = nodes["augment"]["out"] / stats["wall_s"]
print(f'{sys.argv[2]:<10} {stats["threads"]:<8} {rate:10.1f} {nodes["decode"]["busy_s"]:11.2f}s')
PY
)
          echo "$line"
          rate[$mode$threads]=$(echo "$line" | awk '{print $3}')
          rm -f "$stats"
        done
        echo "sparse/full (threads=$threads): $(python3 -c "print(round(${rate[sparse$threads]}/${rate[full$threads]}, 2))")x"
      done
      ;;
  esac
done
