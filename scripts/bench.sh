#!/usr/bin/env bash
# Benchmarks, measured side by side in one run on this machine; paste the output into
# docs/BENCHMARKS.md with this command line.
#   scripts/bench.sh [runner] [data] [auto] [percore] [nvdec] [nvdec-files] [cache] [gpu] [gpu-data]
#                    [ladder]
# runner: the runner's own overhead (5 trivial stages, Google Benchmark).
# data:   data-path samples/s, sparse vs full decode, on one synthetic RoboTwin dataset (GOP 2, AV1),
#         with all cores and with one thread (samples/s per core).
# gpu:    the training profiles on a CUDA machine with the base preset (`wam-pipeline bench`:
#         device part alone vs whole graph, peak memory, transfer per batch). On the GPU machine,
#         build first and run it with WAM_BUILD_DIR=build-gpu WAM_SKIP_SETUP=1.
# gpu-data: on a CUDA machine with NVDEC, `wam-pipeline bench` of libero_compile and
#         robotwin_compile (base preset) on H.264 datasets (the H200's NVDEC has no AV1), as shipped
#         (decoding and Augment on the CPU) against NVDEC with the frames kept in GPU memory and
#         Augment there, against the CPU's decoding with Augment on the GPU, and against VideoDecode's
#         cpu_first decoder (the CPU's, NVDEC and Augment on the GPU for the samples beyond
#         cpu_decodes, $WAM_CPU_DECODES if set, else its default), and cpu_first again with twice
#         the worker threads and the same cpu_decodes (a spilled sample's thread waits on NVDEC,
#         so the extra threads keep the cores busy meanwhile): the data path's
#         samples/s beside the step's ($WAM_GPU_DATA_STEPS timed steps, default 30, after
#         $WAM_GPU_DATA_WARMUP, default 60), then
#         alone (`run --stop-after h2d`, $WAM_DATA_PATH_STEPS batches, default 120: over all of it
#         and over its second half).
#         $WAM_LADDER_TASKS picks the tasks; $WAM_GPU_DATA_ROUTES the routes by number (default
#         "1 2 3 4 5", in the order above); with $WAM_GPU_DATA_BEFORE (another build's wam-pipeline,
#         run on this tree's pipelines) each route is benched with it first, then with this build;
#         WAM_GPU_DATA_PROFILE=1 adds `--profile --profile-graph` (this build only): the kernels the
#         whole graph runs beyond the device part alone, the data path's GPU work per step.
#         $WAM_GPU_DATA_SET adds `--set` overrides to every route, beside the step and alone (e.g.
#         "settings.host_memory_gib=8": a larger host budget than auto's 1/32 of the machine).
# ladder: the profile ladder on a CUDA machine, base preset, for each task of $WAM_LADDER_TASKS
#         (default "libero robotwin"): `cache generate` samples/s, then one `wam-pipeline bench` of
#         the baseline, online, compile and cache graphs (those that exist) on the same synthetic
#         dataset: a table of samples/s, pipeline efficiency and speed-up over baseline, and its
#         plot, docs/ladder_TASK.svg (scripts/ladder_plot.py; $WAM_LADDER_PLOT_DIR moves it).
#         $WAM_ENCODERS swaps the encoder stand-ins (e.g. configs/encoders/reference.json, the
#         reference-cost ones of docs/ENCODERS.md) in every command of the ladder.
# cache:  latent cache reads, 1 and 2 threads, against a plain pread of the same bytes.
# percore: the data path's samples per CPU-second (RoboTwin online, --stop-after augment, on the
#         dataset of `data`; with WAM_PERCORE_TASK=libero the LIBERO compile graph's (the issue's
#         LIBERO measure, uint8 video) on its ladder dataset; $WAM_PERCORE_PIPELINE overrides) of
#         $WAM_BENCH_BEFORE (another build's wam-pipeline) against this build, alternating run by
#         run, $WAM_BENCH_ROUNDS rounds (default 5) of $WAM_BENCH_SAMPLES samples (default 96) at
#         one thread and at all cores. CPU-seconds are the process's user + system time less a one-sample run's
#         (start-up), so other jobs on the machine move them less than wall time; each row is the
#         median, with VideoDecode's and Augment's busy ms per sample, and the ratio per round.
#         Both read this tree's pipeline: a binary from before its params (e.g. planes_size) runs
#         from its own tree through a wrapper instead (docs/BENCHMARKS.md, "Decoding straight to
#         the canvas's size").
# nvdec:  on a machine with NVIDIA's decoder, VideoDecode's `decoder: nvdec` (frames copied to the
#         host, and with `device_frames` kept in GPU memory, where Augment then runs) against the
#         CPU decoder on the dataset of `data` made with H.264 instead of AV1 (the H200's NVDEC has
#         no AV1), and through Augment also the CPU decoder with Augment on the GPU: decoding
#         alone, then the data path through Augment,
#         samples per CPU-second and per wall second at the thread counts of $WAM_BENCH_THREADS
#         (default one and all cores, e.g. "1,2,4,16" for the scaling), alternating run by run,
#         $WAM_BENCH_ROUNDS rounds (default 3; scripts/data_path_compare.py).
# nvdec-files: on a machine with NVIDIA's decoder, decoding alone on a dataset of more files than
#         NVDEC sessions (16 RoboTwin episodes, H.264): the CPU decoder, NVDEC with the frames copied
#         to the host, and with them kept in GPU memory, at one thread and all cores; samples/s over
#         the run and over its second half, with the readers opened and the decoders moved.
# auto:   data-path samples/s (--stop-after augment) with the parallel stages' default,
#         `concurrency: "auto"`, against them fixed at "unlimited" (what they declare), on the
#         same dataset as `data`, all cores; the settings alternate run by run, $WAM_BENCH_ROUNDS
#         rounds (default 3), and each row is the median.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${WAM_SKIP_SETUP:-}" ]; then
  scripts/setup.sh
  scripts/build.sh >/dev/null
fi
build=${WAM_BUILD_DIR:-build}
bin=$build/wam-pipeline
# Augment on the GPU resizes the full-size frames itself: the online graphs' decoding straight to
# the camera planes (VideoDecode's planes_size) is turned off for those variants.
full_frames="nodes.decode.params.planes_size=[],nodes.augment.params.planes_from_decode=false"
# shellcheck source=scripts/bench-data.sh
. scripts/bench-data.sh
what=("${@:-runner data}")
what=(${what[@]})

# data_path_rate STATS: the samples/s that reached h2d in a `run --stop-after h2d` whose
# --stats-out is STATS, start-up included, and over the run's second half (the stats' series of
# one-second buckets: NVDEC's start-up, making its decoders, takes seconds), and the busiest node.
# Samples per batch from Collate's counts (a partial batch at the stop is fewer than the batches
# emitted).
data_path_rate() {
  python3 - "$1" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
nodes = {n["id"]: n for n in stats["nodes"]}
batch = nodes["collate"]["in"] // max(1, nodes["collate"]["out"])
samples = nodes["h2d"]["out"] * batch
busiest = max(stats["nodes"], key=lambda n: n["utilisation"])
series = stats["series"]
times, batches = series["t"], series["nodes"]["h2d"]["items"]
half = len(times) // 2
steady = ""
if len(times) >= 4:
    steady = (f", {batch * sum(batches[half + 1:]) / (times[-1] - times[half]):.2f} over its "
              f"second half")
print(f"  data path alone (run --stop-after h2d): {samples / stats['wall_s']:.2f} samples/s"
      f"{steady}, {samples} samples in {stats['wall_s']:.1f} s; busiest {busiest['id']} "
      f"{100 * busiest['utilisation']:.0f}%; decode's counters {nodes['decode']['counters']}")
PY
}

echo "# $(date -u +%F) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

for item in "${what[@]}"; do
  case "$item" in
    runner)
      "$build/tests/bench/wam_bench_runner" --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "^BM_|Benchmark"
      ;;
    data)
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_gop2
      bench_dataset "$bin" robotwin 4 96 "$root"
      samples=${WAM_BENCH_SAMPLES:-96}
      # name | pipeline | stop after | extra overrides
      runs=(
        "decode full (readers reused)|robotwin_data_baseline|decode|nodes.decode.params.cache_readers=16"
        "decode sparse (readers reused)|robotwin_data_online|decode|"
        "decode baseline profile|robotwin_data_baseline|decode|"
        "decode online profile|robotwin_data_online|decode|"
        "data path baseline profile|robotwin_data_baseline|augment|"
        "data path online profile|robotwin_data_online|augment|"
      )
      printf '%-32s %7s %10s %s\n' run threads samples/s "busiest node"
      for threads in 2 1; do
        for spec in "${runs[@]}"; do
          IFS='|' read -r name pipeline stop extra <<<"$spec"
          stats=$(mktemp)
          args=(--set settings.seed=7 --set "nodes.sampler.params.max_samples=$samples")
          [ -n "$extra" ] && args+=(--set "$extra")
          ROBOTWIN_DATA_ROOT=$root "$bin" run "pipelines/$pipeline.json" --stop-after "$stop" \
            --threads "$threads" --report-every 0 --stats-out "$stats" "${args[@]}" >/dev/null 2>&1
          python3 - "$stats" "$name" "$stop" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
nodes = {n["id"]: n for n in stats["nodes"]}
rate = nodes[sys.argv[3]]["out"] / stats["wall_s"]
busiest = max(stats["nodes"], key=lambda n: n["utilisation"])
print(f'{sys.argv[2]:<32} {stats["threads"]:>7} {rate:10.2f} {busiest["id"]} {100 * busiest["utilisation"]:.0f}%')
PY
          rm -f "$stats"
        done
      done
      ;;
    percore)
      before=${WAM_BENCH_BEFORE:?set WAM_BENCH_BEFORE to the wam-pipeline binary to compare with}
      if [ ! -x "$before" ]; then
        echo "bench.sh percore: WAM_BENCH_BEFORE=$before is not an executable wam-pipeline" >&2
        exit 2
      fi
      if [ "${WAM_PERCORE_TASK:-robotwin}" = libero ]; then
        ladder_data "$bin" libero "${WAM_LADDER_FRAMES:-128}"
        # Absolute: a binary from another tree runs from there.
        LIBERO_DATA_ROOT=$(realpath "$LIBERO_DATA_ROOT")
      else
        export ROBOTWIN_DATA_ROOT=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_gop2
        bench_dataset "$bin" robotwin 4 96 "$ROBOTWIN_DATA_ROOT"
      fi
      default_pipeline=pipelines/robotwin_data_online.json
      [ "${WAM_PERCORE_TASK:-robotwin}" = libero ] && default_pipeline=pipelines/libero_compile.json
      python3 scripts/data_path_compare.py --pipeline "${WAM_PERCORE_PIPELINE:-$default_pipeline}" \
        --samples "${WAM_BENCH_SAMPLES:-96}" --rounds "${WAM_BENCH_ROUNDS:-5}" \
        --threads "1,$(nproc)" "before=$before" "after=$bin"
      ;;
    nvdec)
      # Decoding alone, then the data path through Augment, on the CPU and on NVDEC. H.264: the
      # H200's NVDEC has no AV1 (docs/BENCHMARKS.md, "NVDEC on the H200").
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_h264_gop2
      bench_dataset "$bin" robotwin 4 96 "$root" h264
      for stop in decode augment; do
        echo "## robotwin_data_online, --stop-after $stop"
        gpu_augment=()
        [ "$stop" = augment ] && gpu_augment=("cpu_gpu_augment=$bin,nodes.augment.params.device=cuda,$full_frames")
        ROBOTWIN_DATA_ROOT=$root python3 scripts/data_path_compare.py --stop-after "$stop" \
          --samples "${WAM_BENCH_SAMPLES:-96}" --rounds "${WAM_BENCH_ROUNDS:-3}" \
          --threads "${WAM_BENCH_THREADS:-1,$(nproc)}" "cpu=$bin" \
          "nvdec=$bin,nodes.decode.params.decoder=nvdec" \
          "nvdec_device=$bin,nodes.decode.params.decoder=nvdec,nodes.decode.params.device_frames=true,$full_frames" \
          "${gpu_augment[@]}"
      done
      ;;
    nvdec-files)
      # More files than NVDEC sessions: 16 RoboTwin episodes (48 files) in H.264, decoding alone,
      # every sample of the dataset once, at one thread and all cores: samples/s over the run and
      # over its second half (NVDEC's start-up makes its decoders), and the readers opened.
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_h264_gop2_16
      bench_dataset "$bin" robotwin 16 96 "$root" h264
      for threads in 1 "$(nproc)"; do
        for spec in "cpu|" "nvdec|--set nodes.decode.params.decoder=nvdec" \
          "nvdec, device frames|--set nodes.decode.params.decoder=nvdec --set nodes.decode.params.device_frames=true --set ${full_frames/,/ --set }"; do
          IFS='|' read -r name extra <<<"$spec"
          stats=$(mktemp)
          # shellcheck disable=SC2086  # extra holds several arguments
          if ! ROBOTWIN_DATA_ROOT=$root "$bin" run pipelines/robotwin_data_online.json \
            --stop-after decode --threads "$threads" --set settings.seed=7 --report-every 0 \
            --quiet --stats-out "$stats" $extra >"$stats.log" 2>&1; then
            echo "  $name, $threads threads: failed: $(head -c 300 "$stats.log")"
            rm -f "$stats" "$stats.log"
            continue
          fi
          rm -f "$stats.log"
          python3 - "$stats" "$name" "$threads" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
decode = {n["id"]: n for n in stats["nodes"]}["decode"]
times, items = stats["series"]["t"], stats["series"]["nodes"]["decode"]["items"]
half = len(times) // 2
steady = sum(items[half + 1:]) / (times[-1] - times[half]) if len(times) >= 4 else float("nan")
print(f"  {sys.argv[2]}, {sys.argv[3]} threads: {decode['out'] / stats['wall_s']:.1f} samples/s, "
      f"{steady:.1f} over the second half; {decode['out']} samples in {stats['wall_s']:.1f} s; "
      f"{decode['counters']}")
PY
          rm -f "$stats"
        done
      done
      ;;
    auto)
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_gop2
      bench_dataset "$bin" robotwin 4 96 "$root"
      samples=${WAM_BENCH_SAMPLES:-96}
      rates=$(mktemp)
      for round in $(seq "${WAM_BENCH_ROUNDS:-3}"); do
        for pipeline in robotwin_data_online robotwin_data_baseline; do
          for concurrency in auto unlimited; do
            stats=$(mktemp)
            ROBOTWIN_DATA_ROOT=$root "$bin" run "pipelines/$pipeline.json" --stop-after augment \
              --report-every 0 --quiet --stats-out "$stats" --set settings.seed=7 \
              --set "nodes.sampler.params.max_samples=$samples" \
              --set "nodes.decode.concurrency=$concurrency" \
              --set "nodes.augment.concurrency=$concurrency" >/dev/null 2>&1
            python3 - "$stats" "$pipeline" "$concurrency" >>"$rates" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
nodes = {n["id"]: n for n in stats["nodes"]}
workers = " ".join(f'{i}={nodes[i]["concurrency_mean"]:.2f}' for i in ("decode", "augment"))
print(sys.argv[2], sys.argv[3], stats["threads"], nodes["augment"]["out"] / stats["wall_s"], workers)
PY
            rm -f "$stats"
          done
        done
      done
      python3 - "$rates" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    pipeline, concurrency, threads, rate, *workers = line.split()
    runs.setdefault((pipeline, concurrency, threads), []).append((float(rate), " ".join(workers)))
print(f'{"pipeline":<24} {"concurrency":<11} {"threads":>7} {"samples/s":>9}  runs; mean workers (last run)')
for (pipeline, concurrency, threads), values in runs.items():
    rates = [r for r, _ in values]
    print(f'{pipeline:<24} {concurrency:<11} {threads:>7} {statistics.median(rates):9.2f}  '
          f'{" ".join(f"{r:.2f}" for r in rates)}; {values[-1][1]}')
PY
      rm -f "$rates"
      ;;
    gpu)
      root=${WAM_BENCH_ROOT:-${WAM_CACHE_ROOT:-.cache/wam}/bench}/robotwin_gpu
      bench_dataset "$bin" robotwin 8 128 "$root"
      export ROBOTWIN_DATA_ROOT=$root
      base=(--set include.model=configs/model/base.json --set settings.epochs=1000)
      # Logs go to stderr: redirect it to keep them.
      "$bin" text-cache build pipelines/robotwin_online.json "${base[@]}" >/dev/null
      "$bin" compile pipelines/robotwin_compile.json "${base[@]}" --steps 3 >/dev/null
      # pipeline | timed steps | extra arguments (docs/BENCHMARKS.md lists these runs). The
      # pageable online run differs from the shipped one only in its transfer mode.
      runs=(
        "robotwin_compile|40|"
        "robotwin_online|40|"
        "robotwin_compile|15|--device-only --set nodes.step.params.checkpoint_group=0"
        "robotwin_online|15|--device-only --set nodes.step.params.checkpoint_group=0"
        "robotwin_baseline|40|"
        "robotwin_online|40|--set nodes.h2d.params.mode=pageable"
        "robotwin_compile|15|--device-only --set settings.batch_size=4"
        "robotwin_online|15|--device-only --set settings.batch_size=4"
      )
      for spec in "${runs[@]}"; do
        IFS='|' read -r pipeline steps extra <<<"$spec"
        echo "## $pipeline ${extra:-(as shipped)}"
        began=$SECONDS
        # shellcheck disable=SC2086  # extra holds several arguments
        "$bin" bench "pipelines/$pipeline.json" "${base[@]}" $extra --steps "$steps" --warmup 5
        echo "  ($((SECONDS - began)) s)"
      done
      ;;
    gpu-data)
      base=(--set include.model=configs/model/base.json --set settings.epochs=1000)
      for route in ${WAM_GPU_DATA_ROUTES:-1 2 3 4 5}; do
        [[ "$route" =~ ^[12345]$ ]] || {
          echo "bench.sh gpu-data: WAM_GPU_DATA_ROUTES holds \"$route\": routes are 1 to 5" >&2
          exit 2
        }
      done
      if [ -n "${WAM_GPU_DATA_BEFORE:-}" ] && [ ! -x "$WAM_GPU_DATA_BEFORE" ]; then
        echo "bench.sh gpu-data: WAM_GPU_DATA_BEFORE=$WAM_GPU_DATA_BEFORE is not an executable" \
          "wam-pipeline" >&2
        exit 2
      fi
      # name | extra arguments. Route 5 doubles the threads but keeps route 4's cpu_decodes: a
      # quarter of the cores, as VideoDecode's default (CpuDecodeSlots::default_limit) gives route 4.
      runs=(
        "as shipped|"
        "NVDEC, frames and Augment on the GPU|--set nodes.decode.params.decoder=nvdec --set nodes.decode.params.device_frames=true --set ${full_frames/,/ --set }"
        "CPU decoding, Augment on the GPU|--set nodes.augment.params.device=cuda --set ${full_frames/,/ --set }"
        "CPU first, NVDEC and Augment on the GPU beyond|--set nodes.decode.params.decoder=cpu_first${WAM_CPU_DECODES:+ --set nodes.decode.params.cpu_decodes=$WAM_CPU_DECODES}"
        "CPU first, twice the threads|--set nodes.decode.params.decoder=cpu_first --set nodes.decode.params.cpu_decodes=${WAM_CPU_DECODES:-$(($(nproc) / 4))} --set settings.threads=$((2 * $(nproc)))"
      )
      for task in ${WAM_LADDER_TASKS:-libero robotwin}; do
        ladder_data "$bin" "$task" "${WAM_LADDER_FRAMES:-128}" h264
        "$bin" text-cache build "pipelines/${task}_online.json" "${base[@]}" >/dev/null
        "$bin" compile "pipelines/${task}_compile.json" "${base[@]}" --steps 3 >/dev/null
        builds=("$bin")
        if [ -n "${WAM_GPU_DATA_BEFORE:-}" ]; then builds=("$WAM_GPU_DATA_BEFORE" "$bin"); fi
        for route in ${WAM_GPU_DATA_ROUTES:-1 2 3 4 5}; do
          IFS='|' read -r name extra <<<"${runs[route - 1]}"
          for assignment in ${WAM_GPU_DATA_SET:-}; do extra+=" --set $assignment"; done
          for binary in "${builds[@]}"; do
            echo "## ${task}_compile: $name${WAM_GPU_DATA_SET:+ [$WAM_GPU_DATA_SET]} ($binary)"
            profile=()
            if [ "${WAM_GPU_DATA_PROFILE:-0}" = 1 ] && [ "$binary" = "$bin" ]; then
              profile=(--profile --profile-graph)
            fi
            # Warm-up steps long enough for NVDEC's start-up (its decoders are made in the first
            # seconds: docs/BENCHMARKS.md, "NVDEC's decoders moved between files").
            figures=$(mktemp)
            # shellcheck disable=SC2086  # extra holds several arguments
            "$binary" bench "pipelines/${task}_compile.json" "${base[@]}" $extra \
              --steps "${WAM_GPU_DATA_STEPS:-30}" --warmup "${WAM_GPU_DATA_WARMUP:-60}" \
              --json "$figures" "${profile[@]}"
            python3 -c 'import json, sys
nodes = {n["id"]: n for n in json.load(open(sys.argv[1])).get("graph_stats", {}).get("nodes", [])}
decode = nodes.get("decode", {})
print("  decode beside the step:", decode.get("out"), "samples,", decode.get("counters"))' "$figures"
            rm -f "$figures"
            # The data path alone: the graph up to h2d, without the step to wait for.
            stats=$(mktemp)
            # shellcheck disable=SC2086
            "$binary" run "pipelines/${task}_compile.json" "${base[@]}" $extra --stop-after h2d \
              --steps "${WAM_DATA_PATH_STEPS:-120}" --report-every 0 --quiet --stats-out "$stats" \
              >/dev/null 2>&1
            data_path_rate "$stats"
            rm -f "$stats"
          done
        done
      done
      ;;
    ladder)
      for task in ${WAM_LADDER_TASKS:-libero robotwin}; do
        ladder_data "$bin" "$task" "${WAM_LADDER_FRAMES:-128}"
        export WAM_LATENT_CACHE=${WAM_CACHE_ROOT:-.cache/wam}/bench/${task}_latents
        base=(--set include.model=configs/model/base.json --set settings.epochs=1000)
        if [ -n "${WAM_ENCODERS:-}" ]; then
          base+=(--set "include.encoders=$WAM_ENCODERS")
          WAM_LATENT_CACHE=${WAM_LATENT_CACHE}_$(basename "$WAM_ENCODERS" .json)
        fi
        "$bin" text-cache build "pipelines/${task}_online.json" "${base[@]}" >/dev/null
        "$bin" compile "pipelines/${task}_compile.json" "${base[@]}" --steps 3 >/dev/null
        echo "## ${task}: cache generate (every field of every sample)"
        "$bin" cache generate "pipelines/${task}_cache.json" "${base[@]}" --overwrite 2>/dev/null |
          sed 's/^/  /'
        # One bench of every profile that exists, side by side; the table and an SVG plot.
        files=()
        for profile in baseline online compile cache; do
          [ -f "pipelines/${task}_${profile}.json" ] && files+=("pipelines/${task}_${profile}.json")
        done
        json=$(mktemp)
        echo "## ${task}: bench ${files[*]}"
        "$bin" bench "${files[@]}" "${base[@]}" --steps "${WAM_LADDER_STEPS:-30}" --warmup 5 \
          --json "$json" 2>/dev/null | sed 's/^/  /'
        /usr/bin/python3 scripts/ladder_plot.py "$json" "$task" \
          "${WAM_LADDER_PLOT_DIR:-docs}/ladder_${task}.svg"
        rm -f "$json"
      done
      ;;
    cache)
      "$build/tests/bench/wam_bench_latent_store"
      ;;
    *)
      echo "bench.sh: unknown benchmark \"$item\"; choose from runner, data, auto, percore, nvdec, cache, gpu, ladder" >&2
      exit 2
      ;;
  esac
done
