#!/usr/bin/env bash
# The main job on an embedded default: installs what is missing, builds, synthesises a small
# RoboTwin-shaped dataset under $WAM_DATA_ROOT (default data/), builds the text-embedding cache and
# the latent cache (VAE latents and VLM context rows of every sample), then trains the small model
# preset for a few dozen steps with the cache profile's graph, which decodes no video at all.
# Everything it writes goes under $WAM_DATA_ROOT and $WAM_CACHE_ROOT (default .cache/wam).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only the command line: the test suite and benchmarks (most of a fresh build) are not run here.
scripts/build.sh --target wam-pipeline
bin=${WAM_BUILD_DIR:-build}/wam-pipeline
export WAM_DATA_ROOT=${WAM_DATA_ROOT:-data}
export WAM_CACHE_ROOT=${WAM_CACHE_ROOT:-.cache/wam}
export WAM_OUTPUT_ROOT=${WAM_OUTPUT_ROOT:-$WAM_CACHE_ROOT/runs}
export ROBOTWIN_DATA_ROOT=${ROBOTWIN_DATA_ROOT:-$WAM_DATA_ROOT/robotwin}
export WAM_LATENT_CACHE=${WAM_LATENT_CACHE:-$WAM_CACHE_ROOT/latents}
pipeline=pipelines/robotwin_cache.json

if [ ! -f "$ROBOTWIN_DATA_ROOT/meta/info.json" ]; then
  "$bin" dataset synth --preset robotwin --episodes 4 --frames-per-episode 48 --out "$ROBOTWIN_DATA_ROOT"
fi
"$bin" dataset inspect "$ROBOTWIN_DATA_ROOT"
"$bin" text-cache build "$pipeline"
# Encodes every sample once with the frozen VAE and VLM (a rerun resumes; an existing cache is
# kept unless --overwrite).
# A cache from an earlier run is reused when it still validates (an older format does not).
if ! "$bin" cache validate "$pipeline" >/dev/null 2>&1; then
  "$bin" cache generate "$pipeline" --batch-size 4 --overwrite
fi
"$bin" cache info
# Batches of 2 with 16 samples in flight.
"$bin" run "$pipeline" --steps "${WAM_DEMO_STEPS:-24}" --set settings.batch_size=2 \
  --set settings.max_in_flight=16 \
  --set nodes.step.params.log_every=4 --report-every 20 --stats-out "$WAM_CACHE_ROOT/demo_stats.json"
