#!/usr/bin/env bash
# wam-pipeline under a launcher: two Gloo ranks on 127.0.0.1 building the text cache and the latent
# cache, training data-parallel, resuming on one rank, and failing cleanly when a rank dies.
# Usage: dist_cli_test.sh WAM_PIPELINE_BINARY (run from the source root)
set -uo pipefail
bin=$1
if [ "${WAM_TEST_GLOO:-1}" = 0 ]; then
  echo "SKIP: this build has no Gloo (libgloo-dev), which the CPU ranks of this test reduce with"
  exit 77
fi
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# two_ranks NAME [VAR=VALUE...] -- COMMAND...: COMMAND as ranks 0 and 1 (each bounded by 300 s);
# their output in $work/NAME.0 and .1, their exit statuses in status0 and status1. The GPUs are
# hidden: these ranks run on the CPU (settings.device=cpu), and on a CUDA build each rank would
# otherwise take a GPU of its own for NCCL, which a one-GPU machine cannot give rank 1.
two_ranks() {
  local name=$1 port
  shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  port=$(free_port)
  local pids=()
  for rank in 0 1; do
    env RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      CUDA_VISIBLE_DEVICES= WAM_DIST_TIMEOUT_S=240 "${vars[@]}" timeout 300 "$@" >"$work/$name.$rank" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"; status0=$?
  wait "${pids[1]}"; status1=$?
}

check() {  # check NAME CONDITION_STATUS [FILE...]: reports, and shows FILEs on failure
  local name=$1 ok=$2
  shift 2
  if [ "$ok" -eq 0 ]; then
    echo "ok   $name"
  else
    echo "FAIL $name"; for f in "$@"; do echo "--- $f"; cat "$f"; done; failures=$((failures + 1))
  fi
}

export WAM_CACHE_ROOT=$work/cache WAM_OUTPUT_ROOT=$work/runs ROBOTWIN_DATA_ROOT=$work/robotwin
args=(--set include.model=configs/model/tiny.json --set settings.batch_size=2
      --set settings.device=cpu)
"$bin" dataset synth --preset robotwin --episodes 2 --frames-per-episode 40 --size 80x64 \
  --codec h264 --out "$ROBOTWIN_DATA_ROOT" >/dev/null 2>&1 || { echo "FAIL dataset synth"; exit 1; }

# text-cache build: rank 0 writes, rank 1 waits.
two_ranks text -- "$bin" text-cache build pipelines/robotwin_cache.json "${args[@]}"
[ "$status0" -eq 0 ] && [ "$status1" -eq 0 ] &&
  grep -qF "wrote $WAM_CACHE_ROOT/text_embed/robotwin.h5" "$work/text.0" &&
  grep -qxF "text-cache: rank 1/2 waits for rank 0 to write the cache" "$work/text.1"
check "text-cache build: rank 0 writes, rank 1 waits" $? "$work/text.0" "$work/text.1"

# cache generate on one and on two ranks: the same shards, indexes and manifests.
WAM_LATENT_CACHE=$work/one "$bin" cache generate pipelines/robotwin_cache.json "${args[@]}" \
  --shard-size 16 >"$work/one.out" 2>&1
check "cache generate, one process" $? "$work/one.out"
two_ranks gen WAM_LATENT_CACHE="$work/two" -- "$bin" cache generate pipelines/robotwin_cache.json \
  "${args[@]}" --shard-size 16
[ "$status0" -eq 0 ] && [ "$status1" -eq 0 ] &&
  grep -qxF "cache generate: rank 1/2 wrote shards [2, 5): 48 samples encoded" "$work/gen.1" &&
  grep -qF "VLM cache published: artifact=vlm.current" "$work/gen.0" &&
  ! grep -qF "published" "$work/gen.1"
check "cache generate, two ranks: each writes its block, rank 0 publishes" $? \
  "$work/gen.0" "$work/gen.1"
/usr/bin/python3 - "$work/one" "$work/two" >"$work/compare.out" 2>&1 <<'PY'
import json, os, sys
one, two = sys.argv[1], sys.argv[2]
def strip(value):  # build ids name the build, not its content
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k != "build_id"}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value
catalogs = [json.load(open(os.path.join(r, "catalog.json"))) for r in (one, two)]
artifacts = sorted(catalogs[0]["artifacts"])
assert artifacts == sorted(catalogs[1]["artifacts"]), (artifacts, sorted(catalogs[1]["artifacts"]))
files = 0
for artifact in artifacts:
    dirs = [os.path.dirname(os.path.join(r, c["artifacts"][artifact]["manifest"]))
            for r, c in zip((one, two), catalogs)]
    names = [sorted(os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs)
             for d in dirs]
    assert names[0] == names[1], (artifact, names)
    for name in names[0]:
        a, b = (open(os.path.join(d, name), "rb").read() for d in dirs)
        if name.endswith(".json"):
            assert strip(json.loads(a)) == strip(json.loads(b)), f"{artifact}/{name} differs"
        else:
            assert a == b, f"{artifact}/{name} differs"
        files += 1
print(f"{len(artifacts)} artifacts, {files} files equal")
PY
check "two-rank cache equals the one-process cache byte for byte (build ids aside)" $? \
  "$work/compare.out"

# A rank killed midway: every rank fails, naming it, and the published cache stays as it was.
catalog_before=$(sha256sum "$work/two/catalog.json")
two_ranks killed WAM_LATENT_CACHE="$work/two" WAM_DIST_TEST_EXIT=1:cache_shard -- \
  "$bin" cache generate pipelines/robotwin_cache.json "${args[@]}" --shard-size 16 --overwrite
[ "$status0" -eq 1 ] && [ "$status1" -eq 137 ] &&
  grep -qF "error: cache generate: encoding did not finish on every rank (rank 1 never \
reported: it exited, hangs or is still busy); nothing was published. rank 0/2: all_reduce of the \
ranks' status after encoding failed:" "$work/killed.0" &&
  [ "$(sha256sum "$work/two/catalog.json")" = "$catalog_before" ]
check "cache generate: a killed rank fails the job, named, and nothing is published" $? \
  "$work/killed.0" "$work/killed.1"
grep -m1 "^error:" "$work/killed.0" | sed 's/^/     rank 0: /'

# A rank that fails (here: refuses to overwrite) fails every rank with its message.
two_ranks refused WAM_LATENT_CACHE="$work/two" -- \
  "$bin" cache generate pipelines/robotwin_cache.json "${args[@]}" --shard-size 16 --fields current
[ "$status0" -eq 1 ] && [ "$status1" -eq 1 ] &&
  grep -qF "]. Pass --overwrite to publish replacement builds." "$work/refused.1"
check "cache generate: a refusal on the ranks fails them all" $? "$work/refused.0" "$work/refused.1"

# Data-parallel training: rank 0 logs and saves; samples/s counts both ranks' batches.
export WAM_LATENT_CACHE=$work/two
two_ranks train -- "$bin" run pipelines/robotwin_cache.json "${args[@]}" --steps 2 \
  --set nodes.step.params.log_every=1
[ "$status0" -eq 0 ] && [ "$status1" -eq 0 ] &&
  grep -qF "data-parallel rank 0/2" "$work/train.0" &&
  grep -qF "[train] epoch=0 step=2/2" "$work/train.0" &&
  ! grep -qF "[train]" "$work/train.1" &&
  [ -f "$WAM_OUTPUT_ROOT/robotwin_cache/checkpoints/step_2.safetensors" ] &&
  ! grep -qF "TrainStep: saved" "$work/train.1"
check "train on two ranks" $? "$work/train.0" "$work/train.1"
# ... and resumed by one process.
"$bin" run pipelines/robotwin_cache.json "${args[@]}" --steps 1 \
  --set nodes.step.params.total_steps=4 \
  --set "nodes.step.params.resume=$WAM_OUTPUT_ROOT/robotwin_cache/checkpoints" \
  >"$work/resume.out" 2>&1 &&
  grep -qF "resumed at step 2" "$work/resume.out"
check "a two-rank checkpoint resumes on one process" $? "$work/resume.out"

# A rank that dies during training fails the other at its next all-reduce, with no hang.
two_ranks trainkill WAM_DIST_TEST_EXIT=1:train_step -- "$bin" run pipelines/robotwin_cache.json \
  "${args[@]}" --steps 3
[ "$status0" -eq 1 ] && [ "$status1" -eq 137 ] &&
  grep -qF "rank 0/2: all_reduce of gradient bucket" "$work/trainkill.0"
check "train: a killed rank fails the job with the rank and operation named" $? \
  "$work/trainkill.0" "$work/trainkill.1"
grep -m1 "^error:" "$work/trainkill.0" | sed 's/^/     rank 0: /'


exit $((failures > 0))
