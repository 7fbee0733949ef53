#!/usr/bin/env bash
# End-to-end checks of the wam-pipeline command line: exit codes and the exact lines users see.
# Usage: cli_test.sh WAM_PIPELINE_BINARY CUSTOM_EXAMPLE_BINARY (run from the source root)
set -uo pipefail
bin=$1
custom_bin=$2
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expect() {  # expect NAME EXPECTED_STATUS EXPECTED_LINE -- COMMAND...
  local name=$1 status=$2 line=$3
  shift 4
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -ne "$status" ]; then
    echo "FAIL $name: exit $got, expected $status"; cat "$work/out"; failures=$((failures + 1)); return
  fi
  if [ -n "$line" ] && ! grep -qxF -- "$line" "$work/out"; then
    echo "FAIL $name: missing line: $line"; cat "$work/out"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

expect "unknown stage type names its pointer" 2 \
  'tests/golden/cli_unknown_type.json:/nodes/0/type [sampler: EpisodeSamplr]: unknown stage type "EpisodeSamplr"; did you mean "EpisodeSampler"? (allowed: '"$("$bin" stages | awk '{print $1}' | paste -sd, - | sed 's/,/, /g')"')' \
  -- "$bin" validate tests/golden/cli_unknown_type.json
expect "malformed JSON gives line and column" 2 \
  "tests/golden/malformed.json:5:27: malformed JSON: syntax error while parsing object - unexpected string literal; expected '}'" \
  -- "$bin" validate tests/golden/malformed.json
expect "missing pipeline file" 2 "missing.json: cannot read file: no such file" \
  -- "$bin" validate missing.json
expect "bad --set" 2 "--set settings: expected path.to.key=VALUE" \
  -- "$bin" validate --set settings tests/golden/cli_unknown_type.json
expect "a params-only rule fails validation before anything is opened" 2 \
  "pipelines/robotwin_online.json:/nodes/0/params/rank [sampler: EpisodeSampler]: rank 2 must be < world_size 2" \
  -- "$bin" validate --set nodes.sampler.params.rank=2 --set nodes.sampler.params.world_size=2 \
  pipelines/robotwin_online.json
expect "version flag" 0 "wam-pipeline 0.1.0" -- "$bin" --version
expect "a missing argument is exit 2" 2 "pipeline is required" -- "$bin" run
cores=$(getconf _NPROCESSORS_ONLN)
expect "a bound names the option and the value" 2 \
  "--threads: must be between 0 and $((4 * cores)) (4 x the $cores hardware threads), got -1" \
  -- "$bin" run pipelines/robotwin_online.json --threads -1
expect "an unknown subcommand is named" 2 \
  "unknown subcommand \"datset\"; did you mean \"dataset\"? (allowed: $("$bin" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}' | LC_ALL=C sort | paste -sd, - | sed 's/,/, /g'))" \
  -- "$bin" datset inspect x
expect "bench needs a step to time" 2 "--steps: must be >= 1, got 0" \
  -- "$bin" bench pipelines/robotwin_online.json --steps 0
expect "describe unknown type" 2 \
  "unknown stage type \"Colate\"; did you mean \"Collate\"? (allowed: $("$bin" stages | awk '{print $1}' | paste -sd, - | sed 's/,/, /g'))" \
  -- "$bin" describe Colate
expect_contains() {  # expect_contains NAME EXPECTED_STATUS EXPECTED_TEXT -- COMMAND...
  local name=$1 status=$2 text=$3
  shift 4
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -ne "$status" ] || ! grep -qF -- "$text" "$work/out"; then
    echo "FAIL $name: exit $got (expected $status), expected text: $text"; cat "$work/out"
    failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

# The training graph end to end on a tiny synthetic dataset with the tiny model preset.
export WAM_CACHE_ROOT=$work/cache WAM_OUTPUT_ROOT=$work/runs ROBOTWIN_DATA_ROOT=$work/robotwin
tiny=(--set include.model=configs/model/tiny.json)
expect_contains "dataset synth" 0 "wrote 2 robotwin episodes of 40 frames to $ROBOTWIN_DATA_ROOT" \
  -- "$bin" dataset synth --preset robotwin --episodes 2 --frames-per-episode 40 --size 80x64 \
  --codec h264 --out "$ROBOTWIN_DATA_ROOT"
expect "dataset inspect" 0 \
  "  observation.images.cam_high: h264 80x64, 80 frames in 2 videos, keyframe spacing min 2, max 2 frames" \
  -- "$bin" dataset inspect "$ROBOTWIN_DATA_ROOT"
# Keyframe spacing covers every episode, not the first only: episode 1's cam_high replaced by a
# 30-frame video with a keyframe every 5 frames.
cp -r "$ROBOTWIN_DATA_ROOT" "$work/mixed"
"$bin" dataset synth --preset robotwin --episodes 1 --frames-per-episode 30 --size 80x64 \
  --codec h264 --gop 5 --out "$work/gop5" >/dev/null 2>&1
cp "$work/gop5/videos/chunk-000/observation.images.cam_high/episode_000000.mp4" \
  "$work/mixed/videos/chunk-000/observation.images.cam_high/episode_000001.mp4"
expect "dataset inspect: every episode" 0 \
  "  observation.images.cam_high: h264 80x64, 70 frames in 2 videos, keyframe spacing min 2, max 5 frames" \
  -- "$bin" dataset inspect "$work/mixed"
expect "dataset inspect: frame count problem" 0 \
  "  - $work/mixed/videos/chunk-000/observation.images.cam_high/episode_000001.mp4: 30 frames, but meta/episodes.jsonl says 40" \
  -- "$bin" dataset inspect "$work/mixed"
expect "dataset inspect: a stated sample" 0 \
  "cameras   3 (videos of 1 of 2 episodes (evenly spaced; --episodes 0 reads all))" \
  -- "$bin" dataset inspect "$work/mixed" --episodes 1
expect "dataset inspect: the sample's spacing" 0 \
  "  observation.images.cam_high: h264 80x64, 40 frames in 1 video, keyframe spacing min 2, max 2 frames" \
  -- "$bin" dataset inspect "$work/mixed" --episodes 1
# Each camera's way onto its canvas slot, and the data against the config (issue 26).
stretched='(stretched 1.25x taller; resize "fit" or "fill" keeps the aspect ratio)'
expect "dataset inspect: each camera on its slot" 0 \
  "  observation.images.cam_high: 80x64 -> camera 320x240 -> slot 256x256 at (0, 0) of the canvas: fit, scale 3 x 3, image 240x192 at offset (8, 32), bars filled with level 0" \
  -- "$bin" dataset inspect "$ROBOTWIN_DATA_ROOT" --canvas robotwin --camera-size 240 320 \
  --resize fit
expect "dataset inspect: the default slots" 0 \
  "  observation.images.cam_left_wrist: 80x64 -> slot 256x128 at (0, 128) of the canvas: stretch, scale 3.2 x 2 (stretched 1.6x wider; resize \"fit\" or \"fill\" keeps the aspect ratio)" \
  -- "$bin" dataset inspect "$ROBOTWIN_DATA_ROOT"
expect "validate --data: each camera on its slot" 0 \
  "[augment: Augment] observation.images.cam_high: 80x64 -> camera 320x240 -> slot 256x256 at (0, 0) of the canvas: stretch, scale 3.2 x 4 $stretched" \
  -- "$bin" validate --data pipelines/robotwin_online.json
expect "validate --data: passes" 0 \
  "ok: pipelines/robotwin_online.json (robotwin_online, 9 nodes, data checked)" \
  -- "$bin" validate --data pipelines/robotwin_online.json
expect "validate --data: fill" 0 \
  "[augment: Augment] observation.images.cam_high: 80x64 -> camera 320x240 -> slot 256x256 at (0, 0) of the canvas: fill, scale 4.267 x 4.267, keeps the centre 60x60 at offset (10, 2)" \
  -- "$bin" validate --data pipelines/robotwin_online.json --set nodes.augment.params.resize=fill
expect "validate --data: a camera that is not a video feature" 2 \
  "pipelines/robotwin_online.json:/nodes/0/params/cameras/2 [sampler: EpisodeSampler]: $ROBOTWIN_DATA_ROOT/meta/info.json has no feature \"observation.images.cam_right\" (video features: observation.images.cam_high, observation.images.cam_left_wrist, observation.images.cam_right_wrist)" \
  -- "$bin" validate --data pipelines/robotwin_online.json \
  --set 'nodes.sampler.params.cameras=["observation.images.cam_high", "observation.images.cam_left_wrist", "observation.images.cam_right"]'
expect "validate --data: a layout beyond the dataset's dims" 2 \
  "pipelines/robotwin_online.json:/nodes/0/params/action_layout/0 [sampler: EpisodeSampler]: [0,20,0] reads action dims [0, 20), but $ROBOTWIN_DATA_ROOT/meta/info.json gives action 14 dims" \
  -- "$bin" validate --data pipelines/robotwin_online.json \
  --set 'nodes.sampler.params.action_layout=[[0, 20, 0]]'
expect "validate --data: counts the data errors" 2 "pipelines/robotwin_online.json: 1 data error" \
  -- "$bin" validate --data pipelines/robotwin_online.json \
  --set 'nodes.sampler.params.action_layout=[[0, 20, 0]]'
expect "validate alone opens no data" 0 "ok: pipelines/robotwin_online.json (robotwin_online, 9 nodes)" \
  -- env ROBOTWIN_DATA_ROOT="$work/nothing" "$bin" validate pipelines/robotwin_online.json
expect_contains "training without a text cache says what to run" 1 \
  "run wam-pipeline text-cache build PIPELINE" \
  -- "$bin" run pipelines/robotwin_online.json "${tiny[@]}" --steps 1 --set settings.batch_size=2
expect_contains "text-cache build" 0 "wrote $WAM_CACHE_ROOT/text_embed/robotwin.h5" \
  -- "$bin" text-cache build pipelines/robotwin_online.json "${tiny[@]}"
expect_contains "train 2 steps" 0 "pipeline robotwin_online:" \
  -- "$bin" run pipelines/robotwin_online.json "${tiny[@]}" --steps 2 --set settings.batch_size=2 \
  --stats-out "$work/stats.json"
grep -q '"stop_reason": "steps"' "$work/stats.json" || { echo "FAIL train: stats"; failures=$((failures + 1)); }
# 3 steps with log_every 10: the last step's [train] line, and the summary's first and last loss
# (the first as the stats' loss series has it, the last as the [train] line shows it).
expect_contains "a short run shows its loss" 0 "[train] epoch=0 step=3/3 loss=" \
  -- "$bin" run pipelines/robotwin_online.json "${tiny[@]}" --steps 3 --set settings.batch_size=2 \
  --set settings.device=cpu --stats-out "$work/stats3.json" \
  --set "nodes.step.params.checkpoint_dir=$work/checkpoints3"  # bench's check below looks for step_3
/usr/bin/python3 - "$work/out" "$work/stats3.json" <<'PY' || failures=$((failures + 1))
import json, re, sys
out = open(sys.argv[1]).read()
first = json.load(open(sys.argv[2]))["series"]["loss"]["value"][0]
last = re.search(r"\[train\] epoch=\d+ step=3/3 loss=(\d+\.\d{4}) ", out).group(1)
expected = f"3 steps; loss first {first:.4f}, last {last}"
ok = expected in out.splitlines() and len(re.findall(r"\[train\]", out)) == 1
print(("ok   " if ok else "FAIL ") + "the summary shows the steps and the first and last loss: " + expected)
sys.exit(0 if ok else 1)
PY
[ -f "$WAM_OUTPUT_ROOT/robotwin_online/checkpoints/step_2.safetensors" ] ||
  { echo "FAIL train: no checkpoint step_2.safetensors"; failures=$((failures + 1)); }

# The cache profile: generate, validate, info, train from the cache; refusals; a build killed
# midway keeps the published catalog and resumes.
export WAM_LATENT_CACHE=$work/latents
cache_args=("${tiny[@]}" --set settings.batch_size=2 --set settings.device=cpu)
expect_contains "cache generate publishes every field" 0 \
  "VLM cache published: artifact=vlm.current" \
  -- "$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" --shard-size 32
# Progress (not a terminal: a line per update): no rate before a second update, then one; the end.
if grep -qxF "[                              ] 2/80 samples  - samples/s  ETA -" "$work/out" &&
  grep -qE '^\[=+\] 80/80 samples  [0-9]+\.[0-9] samples/s  ETA 0s$' "$work/out"; then
  echo "ok   cache generate shows its progress"
else
  echo "FAIL cache generate shows its progress"; cat "$work/out"; failures=$((failures + 1))
fi
expect_contains "cache validate --full" 0 "Cache preflight passed: root=$work/latents mode=full" \
  -- "$bin" cache validate pipelines/robotwin_cache.json "${cache_args[@]}" --full
expect_contains "cache info" 0 "  vae_latent.memory_recent" -- "$bin" cache info
expect_contains "train the cache profile" 0 "pipeline robotwin_cache:" \
  -- "$bin" run pipelines/robotwin_cache.json "${cache_args[@]}" --steps 2 \
  --stats-out "$work/cache_stats.json"
# On a CPU the compiled step runs eager: both start-up lines say so.
if grep -qF 'TrainStep: mode "compiled" needs CUDA graphs and a CUDA device; the training device is cpu, so the step runs eager.' "$work/out" &&
  grep -qE '^\[step\] TrainStep: [0-9]+ parameters on cpu, mode eager \("compiled" without CUDA graphs\), checkpoint_group 3, 2 steps$' "$work/out"; then
  echo "ok   the compiled step on a CPU says it runs eager, twice alike"
else
  echo "FAIL the compiled step on a CPU says it runs eager"; cat "$work/out"; failures=$((failures + 1))
fi
/usr/bin/python3 - "$work/cache_stats.json" <<'PY' || failures=$((failures + 1))
import json, sys
nodes = {n["id"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
decoded = dict(nodes["decode"]["counters"]).get("frames_decoded", 0)
hits = dict(nodes["cache"]["counters"]).get("hits", 0)
ok = decoded == 0 and hits >= 4
print(("ok   " if ok else "FAIL ") + f"cache profile decodes no frame ({decoded} decoded, {hits} hits)")
sys.exit(0 if ok else 1)
PY
expect "cache generate keeps existing artifacts" 1 \
  "error: Cache artifacts already exist at $work/latents: [vae_latent.current, vae_latent.memory_anchor, vae_latent.memory_recent, vlm.current]. Pass --overwrite to publish replacement builds." \
  -- "$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}"
expect "cache generate refuses random augmentation" 2 \
  "pipelines/robotwin_cache.json:/nodes/1/params/augment/camera_jitter_prob [cache: LatentCacheLookup]: Offline encoder artifacts require deterministic images; camera_jitter_prob is enabled. Set \"deterministic\": true (e.g. include configs/data/robotwin_deterministic.json)" \
  -- "$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" \
  --set include.data=configs/data/robotwin.json
expect "validate checks the cache node's sampler block" 2 \
  "pipelines/robotwin_cache.json:/nodes/1/params/sampler/num_frames [cache: LatentCacheLookup]: The sampled RGB window must satisfy T % 4 == 1 for the Wan VAE: num_frames=29 and action_video_freq_ratio=4 give T=8" \
  -- "$bin" validate pipelines/robotwin_cache.json --set nodes.cache.params.sampler.num_frames=29
expect "validate checks the cache node's encoder blocks" 2 \
  "pipelines/robotwin_cache.json:/nodes/1/params/vae/sed [cache: LatentCacheLookup]: unknown param \"sed\"; did you mean \"seed\"? (allowed: encoder, path, seed, weights, device, dtype, architecture, width, width_multipliers, res_blocks, deduplicate_identical_anchor_batch)" \
  -- "$bin" validate pipelines/robotwin_cache.json --set nodes.cache.params.vae.sed=1
expect "cache generate names bad fields" 1 \
  "error: Unsupported video latent cache fields [curent]; allowed: current, memory_anchor, memory_recent, vlm." \
  -- "$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" --fields curent
WAM_LATENT_CACHE=$work/no-cache expect "cache validate without a catalog" 1 \
  "error: Cache catalog not found: $work/no-cache/catalog.json. Run \`wam-pipeline cache generate PIPELINE\` first." \
  -- "$bin" cache validate pipelines/robotwin_cache.json "${cache_args[@]}"
catalog_before=$(sha256sum "$work/latents/catalog.json")
"$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" --fields current --overwrite \
  --shard-size 2 --batch-size 2 >"$work/killed.log" 2>&1 &
generating=$!
# A shard counts for a rerun once its record (state/ARTIFACT/shardN.json, written after the shard
# file is renamed into place) exists; killing between the two leaves nothing to resume. A loaded
# CI machine may take minutes to reach the first shard.
shard_recorded=0
for _ in $(seq 3000); do
  if [ -n "$(find "$work/latents/.tmp" -path '*/state/*' -name 'shard*.json' 2>/dev/null |
    head -1)" ]; then
    shard_recorded=1
    break
  fi
  sleep 0.1
done
kill -9 "$generating" 2>/dev/null; wait "$generating" 2>/dev/null
[ "$shard_recorded" = 1 ] ||
  { echo "FAIL the killed build recorded no shard in 300 s"; cat "$work/killed.log"; failures=$((failures + 1)); }
[ "$(sha256sum "$work/latents/catalog.json")" = "$catalog_before" ] ||
  { echo "FAIL a killed build changed catalog.json"; failures=$((failures + 1)); }
expect_contains "the killed build's catalog still validates" 0 "Cache preflight passed" \
  -- "$bin" cache validate pipelines/robotwin_cache.json "${cache_args[@]}"
resume=("$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" --fields current
  --overwrite --shard-size 2 --batch-size 2)
if command -v script >/dev/null; then
  # On a terminal (script gives one) the progress line is redrawn in place: a carriage return
  # before it and an erase-to-end-of-line after it, so a shorter line leaves nothing behind.
  expect_contains "a rerun resumes the killed build" 0 "shards were already written" \
    -- script -qfec "${resume[*]}" "$work/tty"
  if grep -qF $'\r[' "$work/tty" && grep -qF $' samples/s  ETA 0s\x1b[K' "$work/tty"; then
    echo "ok   cache generate redraws its progress line on a terminal"
  else
    echo "FAIL cache generate redraws its progress line on a terminal"; cat -v "$work/tty"
    failures=$((failures + 1))
  fi
else
  expect_contains "a rerun resumes the killed build" 0 "shards were already written" -- "${resume[@]}"
fi
# SIGINT while generating: exit 130, nothing published, a summary naming where a rerun starts, and
# the rerun starting there (docs/RELIABILITY.md, "Signals").
catalog_before=$(sha256sum "$work/latents/catalog.json")
"${resume[@]}" >"$work/interrupted.log" 2>&1 &
generating=$!
for _ in $(seq 600); do
  [ -n "$(find "$work/latents/.tmp" -name 'shard*.json' 2>/dev/null | head -1)" ] && break
  sleep 0.1
done
kill -INT "$generating"
wait "$generating"
status=$?
kept=$(sed -n 's/^interrupted by SIGINT; \([0-9]*\) samples kept in whole shards under .*nothing was published\. Resume with the same command: it starts at sample \1$/\1/p' "$work/interrupted.log")
if [ "$status" -eq 130 ] && [ -n "$kept" ] && [ "$kept" -gt 0 ] &&
  [ "$(sha256sum "$work/latents/catalog.json")" = "$catalog_before" ]; then
  echo "ok   SIGINT stops cache generate: exit 130, $kept samples kept, nothing published"
  expect_contains "the rerun after SIGINT starts where the summary said" 0 \
    "resuming from sample $kept: $((kept / 2)) shards were already written" -- "${resume[@]}"
else
  echo "FAIL SIGINT during cache generate: exit $status"; cat "$work/interrupted.log"
  failures=$((failures + 1))
fi
# Shards also close on time (--shard-seconds): at 0 every batch of 2 closes one, under the shard
# size of 32, and the cache still validates in full.
expect_contains "cache generate --shard-seconds 0 closes a shard per batch" 0 \
  "samples=80 shards=40 bytes=" \
  -- "$bin" cache generate pipelines/robotwin_cache.json "${cache_args[@]}" --fields current \
  --overwrite --shard-size 32 --batch-size 2 --shard-seconds 0
expect_contains "the time-closed shards validate in full" 0 \
  "Cache preflight passed: root=$work/latents mode=full" \
  -- "$bin" cache validate pipelines/robotwin_cache.json "${cache_args[@]}" --full

# One batch in the graph at a time (max_in_flight = batch size): the batch of the last timed step
# enters after the warm-up step ends, so the data path side is measured, not covered by prefetch.
one_batch_in_flight=(--set settings.batch_size=2 --set settings.max_in_flight=2)
expect_contains "bench measures the device part and the whole graph" 0 "  pipeline efficiency:" \
  -- "$bin" bench pipelines/robotwin_online.json "${tiny[@]}" "${one_batch_in_flight[@]}" \
  --set settings.device=cpu --steps 2 --warmup 1 --json "$work/bench.json"
/usr/bin/python3 - "$work/bench.json" <<'PY' || failures=$((failures + 1))
import json, sys
b = json.load(open(sys.argv[1]))
problems = []
if (b["pipeline"], b["timed_steps"], b["warmup_steps"], b["batch_size"]) != ("robotwin_online", 2, 1, 2):
    problems.append(f"header {b['pipeline']} {b['timed_steps']} {b['warmup_steps']} {b['batch_size']}")
if not (b["device_part_samples_per_s"] > 0 and b["graph_step_samples_per_s"] > 0 and b["graph_delivered_samples_per_s"] > 0):
    problems.append("rates must be positive")
if abs(b["pipeline_efficiency"] - b["graph_samples_per_s"] / b["device_part_samples_per_s"]) > 1e-9:
    problems.append("efficiency is not the ratio of the rates")
if not b["transfer_alone_ms_per_batch"] > 0:
    problems.append("the transfer timed alone took no time")
if b["graph_samples_per_s"] != min(b["graph_step_samples_per_s"], b["graph_delivered_samples_per_s"]):
    problems.append("the graph rate is not the lower of the step side and the data path side")
if b["graph_stats"]["stop_reason"] != "steps":
    problems.append("the whole-graph phase did not stop at its steps")
h2d = next(n for n in b["graph_stats"]["nodes"] if n["id"] == "h2d")
# On the CPU there is no pinned pool and no copy: no waits, and the transfer is the node's whole busy time.
if b["transfer_wait_ms_per_batch"] != 0 or b["transfer_device_wait_ms_per_batch"] != 0 or b["transfer_copy_ms_per_batch"] != 0 or abs(b["transfer_ms_per_batch"] - 1e3 * h2d["busy_s"] / h2d["out"]) > 1e-6:
    problems.append(f"transfer {b['transfer_ms_per_batch']} + wait {b['transfer_wait_ms_per_batch']} vs h2d {h2d}")
print("FAIL bench json: " + "; ".join(problems) if problems else "ok   bench json")
sys.exit(1 if problems else 0)
PY
# A step stage of one's own is measured the same way: bench finds it by the TrainingStep interface
# and turns its state off through it, so its state file is never written.
expect_contains "bench measures a step stage of one's own" 0 "  pipeline efficiency:" \
  -- "$custom_bin" bench pipelines/robotwin_online.json "${tiny[@]}" "${one_batch_in_flight[@]}" \
  --set nodes.step.type=MeanStep --set "nodes.step.params={\"state_file\": \"$work/mean_step\"}" \
  --set settings.device=cpu --steps 2 --warmup 1
if [ -e "$work/mean_step" ]; then
  echo "FAIL bench wrote the step's state: $work/mean_step"; failures=$((failures + 1))
else
  echo "ok   bench turns the step's state off through its interface"
fi
expect_contains "bench --profile lists the longest operators" 0 \
  "  profile of 3 steps: " \
  -- "$bin" bench pipelines/robotwin_online.json "${tiny[@]}" --set settings.batch_size=2 \
  --set settings.device=cpu --steps 1 --warmup 1 --device-only --profile --json "$work/profile.json"
/usr/bin/python3 - "$work/profile.json" <<'PY' || failures=$((failures + 1))
import json, sys
p = json.load(open(sys.argv[1]))["profile"]
names = [k["name"] for k in p["longest"]]
problems = []
if p["device_kernels"]:
    problems.append("a CPU run listed device kernels")
if not (1 <= len(names) <= 15) or not all(n.startswith(("aten::", "autograd::", "torch::")) or "Backward" in n or "CppNode" in n for n in names):
    problems.append(f"unexpected entries {names}")
if [k["ms_per_step"] for k in p["longest"]] != sorted((k["ms_per_step"] for k in p["longest"]), reverse=True):
    problems.append("not longest first")
print("FAIL bench profile: " + "; ".join(problems) if problems else "ok   bench profile")
sys.exit(1 if problems else 0)
PY
expect_contains "bench --profile-first profiles the first step alone" 0 \
  "  profile of 1 steps: " \
  -- "$bin" bench pipelines/robotwin_online.json "${tiny[@]}" --set settings.batch_size=2 \
  --set settings.device=cpu --steps 1 --warmup 1 --device-only --profile --profile-first
expect "bench --profile-first needs --profile" 2 "--profile-first requires --profile" \
  -- "$bin" bench pipelines/robotwin_online.json --profile-first
# Several pipelines: each measured, then one table side by side against the first.
"$bin" bench pipelines/robotwin_online.json pipelines/robotwin_online.json "${tiny[@]}" \
  "${one_batch_in_flight[@]}" --set settings.device=cpu --steps 2 --warmup 1 \
  --json "$work/bench2.json" >"$work/out" 2>&1
if grep -qxF "pipeline            samples/s  vs first  efficiency  peak memory" "$work/out" &&
  grep -qE '^robotwin_online #1 +[0-9.]+ +1\.00x +[0-9.]+ +-$' "$work/out" &&
  grep -qE '^robotwin_online #2 +[0-9.]+ +[0-9.]+x +[0-9.]+ +-$' "$work/out" &&
  /usr/bin/python3 - "$work/bench2.json" <<'PY'; then
import json, sys
b = json.load(open(sys.argv[1]))
names = [r["pipeline"] for r in b["table"]]
sys.exit(not (len(b["pipelines"]) == 2 and names == ["robotwin_online #1", "robotwin_online #2"]
              and b["table"][0]["vs_first"] == 1.0))
PY
  echo "ok   bench of several pipelines: one table side by side"
else
  echo "FAIL bench of several pipelines"; cat "$work/out"; failures=$((failures + 1))
fi
expect "bench checks its output directory first" 2 "--json: directory $work/missing does not exist" \
  -- "$bin" bench pipelines/robotwin_online.json --json "$work/missing/bench.json"
expect "bench --trace needs --profile" 2 "--trace requires --profile" \
  -- "$bin" bench pipelines/robotwin_online.json --trace "$work/t.json"
expect "bench --profile-graph and --device-only exclude each other" 2 \
  "--device-only excludes --profile-graph" \
  -- "$bin" bench pipelines/robotwin_online.json --profile-graph --device-only
expect "bench --profile-graph refuses a pipeline that trains on the CPU" 1 \
  "error: bench: pipelines/robotwin_online.json trains on the CPU; --profile-graph lists the device's kernels while the whole graph runs (on the CPU, --profile lists the device part's operators)" \
  -- "$bin" bench pipelines/robotwin_online.json --profile-graph --set settings.device=cpu
[ ! -e "$WAM_OUTPUT_ROOT/robotwin_online/checkpoints/step_3.safetensors" ] ||
  { echo "FAIL bench wrote a checkpoint"; failures=$((failures + 1)); }
expect "bench refuses a data graph" 2 \
  "bench: pipelines/robotwin_data_online.json has no host-to-device node (HostToDevice); bench measures training pipelines (for data graphs use \`run --stats-out\`)" \
  -- "$bin" bench pipelines/robotwin_data_online.json

expect "compile needs a compiled pipeline" 2 \
  "Select a compiled pipeline (TrainStep mode: compiled) to prepare compiler artifacts." \
  -- "$bin" compile pipelines/robotwin_online.json
expect "compile needs two steps" 2 "--steps must be at least 2 for forward/backward replay." \
  -- "$bin" compile pipelines/robotwin_compile.json --steps 1

expect "custom stage registers beside the built-ins" 0 \
  "Brightness          stage   Scales a video tensor by a constant gain." -- "$custom_bin" stages
expect "custom stage describes its params" 0 \
  '  gain   number  1.1      [>= 0, <= 4] Multiplier applied to the video.' -- "$custom_bin" describe Brightness
# A LeRobot dataset of one's own (the real GR00T demo data): its data config drives the cache and
# online graphs, and the data path runs on it.
gr00t_root=$PWD/../shared/data/lerobot-gr00t-picknplace
if [ -d "$gr00t_root" ]; then
  gr00t=(--set include.data=configs/data/gr00t_picknplace_deterministic.json)
  expect "a data config needs its dataset root" 2 \
    "configs/data/gr00t_picknplace_deterministic.json:/sampler/dataset_dirs/0: environment variable GR00T_DATA_ROOT is not set; export it or write \${GR00T_DATA_ROOT:-default}" \
    -- env -u GR00T_DATA_ROOT "$bin" validate pipelines/libero_cache.json "${gr00t[@]}"
  export GR00T_DATA_ROOT=$gr00t_root
  # A --set include path is relative to the current directory; a missing one is one error.
  expect "a missing --set include is one error" 2 \
    "--set include.data=../newcomer/g1_deterministic.json: included file ../newcomer/g1_deterministic.json does not exist" \
    -- "$bin" validate pipelines/libero_cache.json --set include.data=../newcomer/g1_deterministic.json
  [ "$(wc -l <"$work/out")" -eq 2 ] && grep -qxF "pipelines/libero_cache.json: 1 error" "$work/out" ||
    { echo "FAIL a missing include: more than its one error"; cat "$work/out"; failures=$((failures + 1)); }
  mkdir -p "$work/newcomer"
  cp configs/data/gr00t_picknplace_deterministic.json "$work/newcomer/g1.json"
  src=$PWD
  expect "a --set include relative to the current directory" 0 \
    "ok: $src/pipelines/libero_cache.json (libero_cache, 9 nodes)" \
    -- bash -c 'cd "$1/newcomer" && "$2" validate "$3/pipelines/libero_cache.json" --set include.data=g1.json' \
    _ "$work" "$bin" "$src"
  expect "--print-config shows the environment resolved" 0 "  WAM_OUTPUT_ROOT=$WAM_OUTPUT_ROOT" \
    -- "$bin" validate pipelines/libero_cache.json "${gr00t[@]}" --print-config
  expect "--print-config marks defaults" 0 "  WAM_CHECKPOINT_ROOT=checkpoints  (default)" \
    -- env -u WAM_CHECKPOINT_ROOT "$bin" validate pipelines/libero_cache.json "${gr00t[@]}" --print-config
  # The text cache is named after the dataset, not the pipeline's default.
  expect_contains "the text cache is named after the dataset" 0 \
    "wrote $WAM_CACHE_ROOT/text_embed/gr00t_picknplace.h5" \
    -- "$bin" text-cache build pipelines/libero_cache.json "${gr00t[@]}" "${tiny[@]}"
  expect "validate the cache graph on one's own dataset" 0 "" \
    -- "$bin" validate pipelines/libero_cache.json pipelines/libero_online.json "${gr00t[@]}"
  gr00t_meta=$(realpath -s -m "$gr00t_root")/meta
  expect "validate --data on one's own dataset" 0 \
    "[cache: LatentCacheLookup] observation.images.ego_view: 256x256 -> slot 256x384 at (0, 0) of the canvas: stretch, scale 1 x 1.5 (stretched 1.5x taller; resize \"fit\" or \"fill\" keeps the aspect ratio)" \
    -- "$bin" validate --data pipelines/libero_cache.json "${gr00t[@]}"
  expect "validate --data: a declared camera of one's own dataset that has no video" 2 \
    "pipelines/libero_online.json:/nodes/0/params/cameras/0 [sampler: EpisodeSampler]: camera \"observation.images.egoview\" is a video feature of $gr00t_meta/info.json but has no video files (${gr00t_meta%/meta}/videos/chunk-000/observation.images.egoview/episode_000000.mp4 is missing)" \
    -- "$bin" validate --data pipelines/libero_online.json "${gr00t[@]}" \
    --set 'nodes.sampler.params.cameras=["observation.images.egoview"]'
  expect_contains "the data path on one's own dataset" 0 "pipeline libero_data_online:" \
    -- "$bin" run pipelines/libero_data_online.json "${gr00t[@]}" --steps 2 \
    --set settings.batch_size=2 --stats-out "$work/gr00t_stats.json"
  /usr/bin/python3 - "$work/gr00t_stats.json" <<'PY' || failures=$((failures + 1))
import json, sys
nodes = {n["id"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
ok = nodes["collate"]["out"] == 2 and nodes["augment"]["out"] >= 4 and dict(nodes["decode"]["counters"])["frames_decoded"] > 0
print(("ok   " if ok else "FAIL ") + "two batches of one's own dataset")
sys.exit(0 if ok else 1)
PY
else
  echo "skip one's own dataset: $gr00t_root is not present"
fi
for pipeline in pipelines/*.json; do
  expect "validate $pipeline" 0 "" -- "$bin" validate "$pipeline"
  expect "graph $pipeline" 0 "" -- "$bin" graph "$pipeline" -o "$work/graph.dot"
  grep -q '^digraph' "$work/graph.dot" || { echo "FAIL graph $pipeline: no digraph"; failures=$((failures + 1)); }
done

echo "$failures failed"
[ "$failures" -eq 0 ]
