#!/usr/bin/env bash
# Runs wam_dist_tests alone, as a launcher's group of one, and as two Gloo ranks on 127.0.0.1;
# fails when a run fails or takes longer than 300 s. Usage: two_ranks.sh WAM_DIST_TESTS_BINARY (run from the source root)
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

"$bin" >"$work/alone" 2>&1 || { echo "FAIL alone:"; cat "$work/alone"; exit 1; }
echo "ok   one process: $(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests' "$work/alone" | paste -sd' ' -)"

# A launcher's group of one (torchrun --nproc-per-node 1): collectives run over one rank.
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
  WAM_DIST_TIMEOUT_S=120 \
  timeout 300 "$bin" >"$work/group_of_one" 2>&1 ||
  { echo "FAIL group of one:"; cat "$work/group_of_one"; exit 1; }
echo "ok   group of one: $(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests' "$work/group_of_one" | paste -sd' ' -)"

# NCCL takes one GPU per rank, so two ranks need two GPUs, or none (Gloo on the CPU; the GPU
# image's LibTorch has no Gloo headers, so its build cannot fall back to the CPU).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -eq 1 ]; then
  echo "skip two ranks: this machine has one GPU and NCCL takes one GPU per rank"
  exit 0
fi
port=$(free_port)
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    WAM_DIST_TIMEOUT_S=120 timeout 300 "$bin" >"$work/rank$rank" 2>&1 &
  pids+=($!)
done
failures=0
for rank in 0 1; do
  if wait "${pids[$rank]}"; then
    echo "ok   rank $rank: $(grep -E '^\[  PASSED ' "$work/rank$rank")"
    if grep -q '^\[  SKIPPED' "$work/rank$rank"; then
      echo "FAIL rank $rank skipped tests:"; grep SKIPPED "$work/rank$rank"
      failures=$((failures + 1))
    fi
  else
    echo "FAIL rank $rank (exit $?):"; cat "$work/rank$rank"; failures=$((failures + 1))
  fi
done
exit $((failures > 0))
