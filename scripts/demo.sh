#!/usr/bin/env bash
# The main job on an embedded default: installs what is missing, builds, synthesises a small
# RoboTwin-shaped dataset under $WAM_DATA_ROOT (default data/) and runs the online data pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=${WAM_BUILD_DIR:-build}/wam-pipeline
export WAM_DATA_ROOT=${WAM_DATA_ROOT:-data}
export WAM_CACHE_ROOT=${WAM_CACHE_ROOT:-.cache/wam}
export ROBOTWIN_DATA_ROOT=${ROBOTWIN_DATA_ROOT:-$WAM_DATA_ROOT/robotwin}
if [ ! -f "$ROBOTWIN_DATA_ROOT/meta/info.json" ]; then
  "$bin" dataset synth --preset robotwin --episodes 4 --frames-per-episode 96 --out "$ROBOTWIN_DATA_ROOT"
fi
"$bin" dataset inspect "$ROBOTWIN_DATA_ROOT"
"$bin" run pipelines/robotwin_data_online.json --steps "${WAM_DEMO_STEPS:-6}" --report-every 5 \
  --stats-out "$WAM_CACHE_ROOT/demo_stats.json"
