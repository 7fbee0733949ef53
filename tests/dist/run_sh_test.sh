#!/usr/bin/env bash
# scripts/run.sh: its validation messages and exit codes, and the commands it would run (DRY_RUN).
# Usage: run_sh_test.sh (from the source root)
set -uo pipefail
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The test controls PATH, so that no torchrun (Debian's python3-torch brings one) or nvidia-smi
# the machine happens to have changes what run.sh does: $work/sys holds only the tools run.sh
# needs, $work/torchrun a fake torchrun to put before it.
mkdir -p "$work/sys" "$work/torchrun"
for tool in bash date grep; do
  ln -s "$(command -v "$tool")" "$work/sys/$tool"
done
printf '#!/bin/sh\nexit 0\n' >"$work/torchrun/torchrun"
chmod +x "$work/torchrun/torchrun"
no_torchrun=$work/sys
with_torchrun=$work/torchrun:$work/sys

expect() {  # expect NAME STATUS EXPECTED_OUTPUT -- VAR=VALUE... (run.sh's arguments follow "--")
  local name=$1 status=$2 text=$3
  shift 4
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  env -u NPROC_PER_NODE -u NNODES -u NODE_RANK -u MASTER_ADDR -u MASTER_PORT -u RUN_ID \
    PATH="$no_torchrun" WAM_PIPELINE_BIN=/opt/wam-pipeline "${vars[@]}" \
    scripts/run.sh "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -ne "$status" ] || [ "$(cat "$work/out")" != "$text" ]; then
    echo "FAIL $name: exit $got (expected $status), output:"; cat "$work/out"
    echo "expected:"; echo "$text"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

expect "counts must be integers" 2 "Node and process counts must be integers." \
  -- NPROC_PER_NODE=two -- robotwin_cache
expect "NNODES must be an integer" 2 "Node and process counts must be integers." \
  -- NPROC_PER_NODE=2 NNODES=1.5 -- robotwin_cache
expect "a positive process count" 2 \
  "Need visible GPUs, a positive process count, and 0 <= NODE_RANK < NNODES." \
  -- NPROC_PER_NODE=0 -- robotwin_cache
expect "NODE_RANK < NNODES" 2 \
  "Need visible GPUs, a positive process count, and 0 <= NODE_RANK < NNODES." \
  -- NPROC_PER_NODE=2 NNODES=2 NODE_RANK=2 -- robotwin_cache
expect "several nodes need MASTER_ADDR" 2 "Set the rank-0 hostname/IP on every node" \
  -- NPROC_PER_NODE=2 NNODES=2 NODE_RANK=1 RUN_ID=r1 -- robotwin_cache
expect "several nodes need RUN_ID" 2 "Set the same RUN_ID on every node" \
  -- NPROC_PER_NODE=2 NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 -- robotwin_cache
expect "MASTER_PORT in range" 2 "MASTER_PORT must be an integer in [1, 65535]." \
  -- NPROC_PER_NODE=2 MASTER_PORT=70000 -- robotwin_cache
expect "no arguments" 2 "Usage: scripts/run.sh PIPELINE|COMMAND [wam-pipeline args]" -- --
expect "one process needs no launcher" 0 \
  "/opt/wam-pipeline run pipelines/robotwin_cache.json --steps 10 " \
  -- NPROC_PER_NODE=1 DRY_RUN=1 -- robotwin_cache --steps 10
expect "its own loop without torchrun" 0 \
  "RANK=2 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=node0 MASTER_PORT=29500 /opt/wam-pipeline cache generate pipelines/robotwin_cache.json 
RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=node0 MASTER_PORT=29500 /opt/wam-pipeline cache generate pipelines/robotwin_cache.json " \
  -- NPROC_PER_NODE=2 NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 RUN_ID=r1 DRY_RUN=1 \
  -- cache generate pipelines/robotwin_cache.json
expect "torchrun where installed" 0 \
  "torchrun --nnodes 1 --nproc_per_node 2 --node_rank 0 --master_addr 127.0.0.1 --master_port 29511 --no_python /opt/wam-pipeline run pipelines/robotwin_cache.json " \
  -- NPROC_PER_NODE=2 MASTER_PORT=29511 DRY_RUN=1 PATH="$with_torchrun" -- robotwin_cache
# The checks before any launch are the same with a torchrun on PATH.
expect "counts must be integers, torchrun on PATH" 2 "Node and process counts must be integers." \
  -- NPROC_PER_NODE=two PATH="$with_torchrun" -- robotwin_cache
expect "one process needs no launcher, torchrun on PATH" 0 \
  "/opt/wam-pipeline run pipelines/robotwin_cache.json --steps 10 " \
  -- NPROC_PER_NODE=1 DRY_RUN=1 PATH="$with_torchrun" -- robotwin_cache --steps 10
exit $((failures > 0))
