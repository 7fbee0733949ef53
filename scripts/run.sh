#!/usr/bin/env bash
# Multi-GPU and multi-node training: one wam-pipeline process per GPU, data-parallel over c10d.
#
#   scripts/run.sh PIPELINE [wam-pipeline run args]   e.g. scripts/run.sh robotwin_cache --steps 100
#   scripts/run.sh COMMAND [args]                        cache generate | text-cache build | compile
#
# PIPELINE is a pipeline file or a name under pipelines/ (robotwin_cache is
# pipelines/robotwin_cache.json).
# Environment, as the reference's run.sh:
#   NPROC_PER_NODE  processes on this node (default: the visible GPUs, else 1)
#   NNODES          nodes (default 1)             NODE_RANK  this node, 0 .. NNODES-1 (default 0)
#   MASTER_ADDR     rank 0's host (required with several nodes; default 127.0.0.1)
#   MASTER_PORT     rank 0's port (default 29500)
#   RUN_ID          names the run (required, and the same, on every node with several nodes;
#                   default: UTC %Y%m%d_%H%M%S); exported with WAM_RUN_ID
#   DRY_RUN=1       print the command instead of running it
#   WAM_PIPELINE_BIN  the binary (default: ${WAM_BUILD_DIR:-build}/wam-pipeline)
# Starts the processes with torchrun where it is installed, else with its own loop that sets the
# same variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
# ends the other processes when one fails. One process alone needs no launcher. Run it once per
# node; every node needs the same files at the same paths (datasets, caches, output root).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "Usage: scripts/run.sh PIPELINE|COMMAND [wam-pipeline args]" >&2
  exit 2
fi

NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_PORT=${MASTER_PORT:-29500}
if [ -z "${NPROC_PER_NODE:-}" ]; then
  NPROC_PER_NODE=1
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${gpus:-0}" -gt 0 ] && NPROC_PER_NODE=$gpus
  fi
fi

is_integer() { [[ $1 =~ ^[0-9]+$ ]]; }
if ! is_integer "$NPROC_PER_NODE" || ! is_integer "$NNODES" || ! is_integer "$NODE_RANK"; then
  echo "Node and process counts must be integers." >&2
  exit 2
fi
if [ "$NNODES" -le 0 ] || [ "$NPROC_PER_NODE" -le 0 ] || [ "$NODE_RANK" -ge "$NNODES" ]; then
  echo "Need visible GPUs, a positive process count, and 0 <= NODE_RANK < NNODES." >&2
  exit 2
fi
if ! is_integer "$MASTER_PORT" || [ "$MASTER_PORT" -lt 1 ] || [ "$MASTER_PORT" -gt 65535 ]; then
  echo "MASTER_PORT must be an integer in [1, 65535]." >&2
  exit 2
fi
if [ "$NNODES" -gt 1 ]; then
  if [ -z "${MASTER_ADDR:-}" ]; then
    echo "Set the rank-0 hostname/IP on every node" >&2
    exit 2
  fi
  if [ -z "${RUN_ID:-}" ]; then
    echo "Set the same RUN_ID on every node" >&2
    exit 2
  fi
fi
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
RUN_ID=${RUN_ID:-$(date -u +%Y%m%d_%H%M%S)}
export RUN_ID WAM_RUN_ID=$RUN_ID

bin=${WAM_PIPELINE_BIN:-${WAM_BUILD_DIR:-build}/wam-pipeline}
case $1 in
  run | cache | text-cache | compile | bench | validate) args=("$@") ;;
  *)
    pipeline=$1
    shift
    if [ ! -f "$pipeline" ] && [ -f "pipelines/$pipeline.json" ]; then
      pipeline=pipelines/$pipeline.json
    fi
    args=(run "$pipeline" "$@")
    ;;
esac

world=$((NNODES * NPROC_PER_NODE))
if [ "$world" -eq 1 ]; then
  command=("$bin" "${args[@]}")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${command[@]}"; echo
    exit 0
  fi
  exec "${command[@]}"
fi

if command -v torchrun >/dev/null 2>&1; then
  command=(torchrun --nnodes "$NNODES" --nproc_per_node "$NPROC_PER_NODE" --node_rank "$NODE_RANK"
           --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --no_python
           "$bin" "${args[@]}")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${command[@]}"; echo
    exit 0
  fi
  exec "${command[@]}"
fi

# No torchrun: one process per local rank with the variables torchrun would set.
if [ "${DRY_RUN:-0}" = 1 ]; then
  for ((local = 0; local < NPROC_PER_NODE; local++)); do
    printf 'RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d LOCAL_WORLD_SIZE=%d ' \
      $((NODE_RANK * NPROC_PER_NODE + local)) "$world" "$local" "$NPROC_PER_NODE"
    printf 'MASTER_ADDR=%q MASTER_PORT=%d ' "$MASTER_ADDR" "$MASTER_PORT"
    printf '%q ' "$bin" "${args[@]}"; echo
  done
  exit 0
fi
pids=()
for ((local = 0; local < NPROC_PER_NODE; local++)); do
  RANK=$((NODE_RANK * NPROC_PER_NODE + local)) WORLD_SIZE=$world LOCAL_RANK=$local \
    LOCAL_WORLD_SIZE=$NPROC_PER_NODE GROUP_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR \
    MASTER_PORT=$MASTER_PORT "$bin" "${args[@]}" &
  pids+=($!)
done
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap 'stop; exit 130' INT TERM
# As torchrun: the first process to fail ends the others; the job's status is its status.
status=0
remaining=${#pids[@]}
while [ "$remaining" -gt 0 ]; do
  set +e
  wait -n
  code=$?
  set -e
  remaining=$((remaining - 1))
  if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$code
    echo "run.sh: a process exited with status $code; stopping the others" >&2
    stop
  fi
done
exit "$status"
