#!/usr/bin/env bash
# A session's GPU work as one background job on the device machine, so that a sequence of phases
# longer than one device call (10 minutes) runs on while each call only waits and brings back what
# is done. The machine is released after 30 s without a call: call `wait` again at once.
#   source .gpu/gpu-env.sh && source .gpu-extra/env.sh && export OUT
#   scripts/gpu-session.sh start PHASE...   # then, in every later call:
#   scripts/gpu-session.sh wait SECONDS      # until done or SECONDS pass; results in $OUT/all.txt
# Phases, run in the order given, each one's output in $WAM_GPU_SESSION_DIR (default
# /tmp/gpu-session) as NN-PHASE.txt:
#   build    scripts/gpu-check.sh build (every target, and how wam-pipeline was linked)
#   quick    ctest of $WAM_QUICK_TESTS (default: the link, NVDEC (the real-data sample's and the
#            shared readers' included), NVDEC training, cache, VAE stand-in, the data path on the
#            GPU, GPU Augment, CUDA
#            step, epilogue-product, constant-rows, fused-norm, token-split, pinned-copy and
#            two-rank tests;
#            about 60 s)
#   test     scripts/gpu-check.sh test (the whole ctest, 600 s on the H200 on 2026-12-04, the
#            AOTInductor export test among them), its log as it goes in ctest-log.txt
#   cache    scripts/bench.sh cache
#   ladder-libero, ladder-robotwin
#            scripts/bench.sh ladder for that task on the reference-cost encoders, 20 timed steps
#   exported-vae  scripts/exported-vae-bench.sh at width 128
#   attention  scripts/attention-bench.py (SDPA's kernels on the step's attention shapes, as a
#            replayed CUDA graph; its figures also in attention.json)
#   nvdec    scripts/bench.sh nvdec, $WAM_BENCH_ROUNDS rounds (default 3)
#   nvdec-files  scripts/bench.sh nvdec-files (more files than NVDEC sessions)
#   gpu-data scripts/bench.sh gpu-data (the data path on NVDEC and the GPU beside the step; with
#            WAM_GPU_DATA_BEFORE, another build's wam-pipeline or a source tree (built first,
#            wam-pipeline only, in /tmp/build-data-before), each route also with that build;
#            WAM_GPU_DATA_PROFILE=1 lists the kernels the whole graph adds over the device part
#            alone)
#   percore-libero  scripts/bench.sh percore on LIBERO (3 rounds of 256 samples) against the
#            source tree in $WAM_PERCORE_BEFORE (built first, wam-pipeline only, in
#            /tmp/build-before; run from that tree, with its own pipelines)
#   step     scripts/step-bench.sh against the source trees in $WAM_STEP_BEFORE (if set; several
#            separated by spaces), $WAM_STEP_BENCH_ROUNDS rounds (default 1), no peer unless
#            WAM_STEP_BENCH_NO_PEER=0
#   kernels  scripts/kernel-variants.sh with the variants in $WAM_KERNEL_VARIANTS, one a line (a
#            sed variant's expression may hold spaces; default: this tree alone), no project build
# PHASE@SECONDS stops that phase after SECONDS (its output so far is kept), e.g. nvdec@240.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
dir=${WAM_GPU_SESSION_DIR:-/tmp/gpu-session}

# Builds wam-pipeline of the source tree $1 in $2, printing the first errors if it fails.
build_tree() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$2.log" 2>&1 &&
    ninja -C "$2" wam-pipeline >>"$2.log" 2>&1 && return 0
  grep -m5 -A4 -E "error|No such file" "$2.log"
  tail -5 "$2.log"
  echo "files in $1/stages/common: $(find "$1/stages/common" -maxdepth 1 -type f | wc -l)"
  return 1
}
case "${1:-}" in
  start)
    shift
    [ $# -gt 0 ] || { echo "gpu-session: name the phases to run" >&2; exit 2; }
    mkdir -p "$dir"
    : >"$dir/progress.txt"
    setsid nohup "$0" run "$@" >"$dir/driver.log" 2>&1 </dev/null &
    echo "gpu-session: started $* (progress in $dir/progress.txt)"
    ;;
  run)
    shift
    export WAM_BUILD_DIR=${WAM_BUILD_DIR:-/tmp/build-gpu} WAM_SKIP_SETUP=1
    n=0
    for spec in "$@"; do
      phase=${spec%@*}
      limit=0  # timeout's 0: no limit
      [ "$phase" = "$spec" ] || limit=${spec#*@}
      n=$((n + 1))
      out=$(printf '%s/%02d-%s.txt' "$dir" "$n" "$phase")
      echo "=== $(date +%T) $spec" >>"$dir/progress.txt"
      # Each phase is its own process under timeout, so one that runs past its limit stops whole.
      timeout -k 10 "$limit" "$0" phase "$phase" >"$out" 2>&1
      echo "rc=$?" >>"$out"
    done
    echo "=== $(date +%T) done" >>"$dir/progress.txt"
    ;;
  phase)
    phase=${2:-}
    case "$phase" in
      build) scripts/gpu-check.sh build ;;
      quick)
        ctest --test-dir "$WAM_BUILD_DIR" -j8 --timeout 300 --output-on-failure -R \
          "${WAM_QUICK_TESTS:-link_order|filesystem_binding|cli_nvdec_training|vae_standin|dist_two_ranks|LatentCache|Nvdec|VideoDecodeTest|SharedReaderPool|VideoReaderDataset|DataPipeline|AugmentTensorOps|Collate|TrainStepCuda|AdamWCuda|EpilogueLinear|ConstantRowsLinear|FusedAdaLnCuda|FusedNorm|SplitTokens|HostToDeviceCuda}"
        ;;
      test) WAM_CTEST_LOG=$dir/ctest-log.txt scripts/gpu-check.sh test ;;
      cache) scripts/bench.sh cache ;;
      ladder-libero | ladder-robotwin)
        WAM_LADDER_TASKS=${phase#ladder-} WAM_LADDER_STEPS=20 WAM_LADDER_PLOT_DIR=$dir \
          WAM_ENCODERS=configs/encoders/reference.json scripts/bench.sh ladder
        ;;
      exported-vae) WAM_EXPORTED_VAE_WIDTHS=128 scripts/exported-vae-bench.sh ;;
      attention) python3 scripts/attention-bench.py --iters 50 --json "$dir/attention.json" ;;
      nvdec) WAM_BENCH_ROUNDS=${WAM_BENCH_ROUNDS:-3} scripts/bench.sh nvdec ;;
      nvdec-files) scripts/bench.sh nvdec-files ;;
      gpu-data)
        if [ -d "${WAM_GPU_DATA_BEFORE:-}" ]; then
          build_tree "$(realpath "$WAM_GPU_DATA_BEFORE")" /tmp/build-data-before || exit 1
          export WAM_GPU_DATA_BEFORE=/tmp/build-data-before/wam-pipeline
        fi
        scripts/bench.sh gpu-data
        ;;
      percore-libero)
        before_tree=$(realpath "${WAM_PERCORE_BEFORE:?set WAM_PERCORE_BEFORE to a source tree}")
        build_tree "$before_tree" /tmp/build-before || exit 1
        printf '#!/bin/bash\ncd %q && exec /tmp/build-before/wam-pipeline "$@"\n' "$before_tree" \
          >/tmp/run-before && chmod +x /tmp/run-before
        WAM_BENCH_BEFORE=/tmp/run-before WAM_PERCORE_TASK=libero WAM_BENCH_SAMPLES=256 \
          WAM_BENCH_ROUNDS=3 scripts/bench.sh percore
        ;;
      kernels)
        mapfile -t variants <<<"${WAM_KERNEL_VARIANTS:-now=.}"
        scripts/kernel-variants.sh "${variants[@]}"
        ;;
      step)
        # shellcheck disable=SC2086  # WAM_STEP_BEFORE may name several trees
        OUT=$dir WAM_STEP_BENCH_NO_PEER=${WAM_STEP_BENCH_NO_PEER:-1} \
          WAM_STEP_BENCH_ROUNDS=${WAM_STEP_BENCH_ROUNDS:-1} \
          scripts/step-bench.sh ${WAM_STEP_BEFORE:-}
        ;;
      *) echo "gpu-session: unknown phase $phase" ;;
    esac
    ;;
  wait)
    limit=${2:-540}
    [ -f "$dir/progress.txt" ] || { echo "gpu-session: nothing started on this machine"; exit 3; }
    mkdir -p "${OUT:?set OUT to the folder the device call brings back}"
    # What is done so far, in $OUT/all.txt: written every 5 s as well as at the end, so that a
    # call stopped at its limit (the device budget left can cut it short) still brings it back.
    collect() {
      for f in "$dir"/*.txt; do echo "##### $(basename "$f")"; cat "$f"; done >"$OUT/all.txt.part"
      mv "$OUT/all.txt.part" "$OUT/all.txt"
    }
    began=$SECONDS
    while [ $((SECONDS - began)) -lt "$limit" ] && ! grep -q "=== .* done" "$dir/progress.txt"; do
      sleep 5
      collect
    done
    cat "$dir/progress.txt"
    collect
    cp "$dir"/*.svg "$OUT/" 2>/dev/null || true
    tail -c 3000 "$OUT/all.txt"
    ;;
  *)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 2
    ;;
esac
