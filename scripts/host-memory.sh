#!/usr/bin/env bash
# Peak host memory of a short online run and of `cache generate` on a 640x480 one-camera dataset
# with the tiny model on the CPU (issue 25; docs/BENCHMARKS.md, "Host memory of a short online run"
# and "Host memory of cache generate"). Paste its output there with this command line.
#   scripts/host-memory.sh [WAM_PIPELINE] [EXTRA --set ARGS...]
# The dataset: `dataset synth --preset libero --size 640x480`, 4 episodes of 160 frames, its wrist
# camera dropped (the shared data holds no 640x480 LeRobot set). Work files in $WAM_HOSTMEM_DIR
# (default /tmp/wam-host-memory), kept between runs.
set -euo pipefail
bin=${1:-build/wam-pipeline}
shift || true
dir=${WAM_HOSTMEM_DIR:-/tmp/wam-host-memory}
data=$dir/libero640
mkdir -p "$dir"
export WAM_CACHE_ROOT=$dir/cache WAM_OUTPUT_ROOT=$dir/runs WAM_LATENT_CACHE=$dir/latents
if [ ! -f "$data/meta/info.json" ]; then
  "$bin" dataset synth --preset libero --episodes 4 --frames-per-episode 160 --size 640x480 \
    --out "$data" >/dev/null
  /usr/bin/python3 - "$data" <<'EOF'
import json, shutil, sys
root = sys.argv[1]
info = json.load(open(f"{root}/meta/info.json"))
del info["features"]["observation.images.wrist_image"]
info["total_videos"] = info["total_episodes"]
json.dump(info, open(f"{root}/meta/info.json", "w"), indent=4)
shutil.rmtree(f"{root}/videos/chunk-000/observation.images.wrist_image")
EOF
fi
# The LIBERO data configs (online: libero.json, cache: its deterministic variant) on that dataset.
for kind in online cache; do
  /usr/bin/python3 - "$data" "$kind" "$dir/data_$kind.json" <<'EOF'
import json, sys
name = {"online": "libero", "cache": "libero_deterministic"}[sys.argv[2]]
config = json.load(open(f"configs/data/{name}.json"))
config["sampler"]["dataset_dirs"] = [sys.argv[1]]
config["sampler"]["cameras"] = ["observation.images.image"]
json.dump(config, open(sys.argv[3], "w"), indent=2)
EOF
done
set_args=(--set include.model=configs/model/tiny.json --set settings.device=cpu "$@")
online=(--set "include.data=$dir/data_online.json" "${set_args[@]}")
cache=(--set "include.data=$dir/data_cache.json" "${set_args[@]}")
"$bin" text-cache build pipelines/libero_online.json "${online[@]}" >/dev/null
peak() { awk '/Maximum resident/ {printf "%.2f GiB", $6 / 1048576; exit}' "$1"; }
/usr/bin/time -v "$bin" run pipelines/libero_online.json "${online[@]}" --steps 8 \
  --report-every 0 >"$dir/online.log" 2>&1
echo "online, 8 steps of 16: peak $(peak "$dir/online.log"); $(grep -o '[0-9.]* samples/s' \
  "$dir/online.log" | tail -1); $(grep -m1 '^host memory budget' "$dir/online.log" || true)"
rm -rf "$WAM_LATENT_CACHE"
/usr/bin/time -v "$bin" cache generate pipelines/libero_cache.json "${cache[@]}" \
  --max-samples 128 >"$dir/cache.log" 2>&1
echo "cache generate, 128 samples: peak $(peak "$dir/cache.log"); $(grep -o \
  'throughput=[0-9.]* samples/s' "$dir/cache.log" | head -1); $(grep -m1 '^host memory budget' \
  "$dir/cache.log" || true)"
