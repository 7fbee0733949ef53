#!/usr/bin/env bash
# Fuzzes with libFuzzer: configures a clang build in ${WAM_FUZZ_BUILD_DIR:-build-fuzz} with
# -DWAM_FUZZ=ON (coverage + AddressSanitizer + UndefinedBehaviorSanitizer), builds the fuzz
# targets of tests/fuzz and runs each for SECONDS (default 60). Exits 1 on a finding (a crash, a
# sanitizer report, an uncaught exception, a 10 s hang or 2 GiB of memory); the input is left in
# build-fuzz/findings/<target>/. Fix it, then keep it as a regression:
#   cp build-fuzz/findings/<target>/crash-... tests/fuzz/regressions/<target>/<what-it-was>
# (the ctest fuzz_<target> replays every regression through the normal gcc build).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 pipeline_loader
#
# Adding a target (e.g. dataset_reader for info.json / episodes.jsonl / parquet columns): see
# tests/fuzz/CMakeLists.txt (wam_add_fuzz_target), then add its name to `all_targets` below and
# its seed directories to seed_dirs().
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(pipeline_loader parquet_file dataset_meta cache_json)

# Directories whose files seed a target's corpus, besides tests/fuzz/seeds/<target> and
# tests/fuzz/regressions/<target>.
seed_dirs() {
  case "$1" in
    pipeline_loader) echo pipelines tests/golden ;;
  esac
}

seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
build=${WAM_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${WAM_FUZZ_CXX:-clang++-14}
cc=${WAM_FUZZ_CC:-clang-14}
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx is missing (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }

if [ ! -f "$build/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_COMPILER="$cxx" -DWAM_FUZZ=ON -DWAM_BUILD_BENCHMARKS=OFF "${launcher[@]}"
fi
cmake --build "$build" -j "${WAM_BUILD_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"

status=0
for target in "${targets[@]}"; do
  corpus=$build/corpus/$target
  findings=$build/findings/$target
  mkdir -p "$corpus" "$findings"
  seeds=()
  for dir in tests/fuzz/seeds/$target tests/fuzz/regressions/$target $(seed_dirs "$target"); do
    [ -d "$dir" ] && seeds+=("$dir")
  done
  echo "fuzz: $target for ${seconds}s (corpus $corpus, seeds ${seeds[*]})"
  start=$(date +%s)
  # The first directory collects the corpus found; the others only seed it.
  if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
      "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len=131072 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/" \
      "$corpus" "${seeds[@]}" >"$build/fuzz_$target.log" 2>&1; then
    echo "fuzz: $target: no finding in $(( $(date +%s) - start ))s ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/fuzz_$target.log" | grep -o '[0-9]*$' || echo '?') inputs)"
  else
    status=1
    tail -n 60 "$build/fuzz_$target.log"
    echo "fuzz: $target: FINDING, see $findings/ and $build/fuzz_$target.log" >&2
  fi
done
exit $status
