#!/usr/bin/env bash
# The command line's error contract (docs/RELIABILITY.md), on hostile input: exit 2 for every
# invalid input, naming the file and JSON pointer (or line:col, or the argument); exit 1 for a
# failing stage; 130 / 143 for SIGINT / SIGTERM, with the summary and --stats-out written.
# Usage: error_contract_test.sh WAM_PIPELINE_BINARY (run from the source root). The binary may be
# wam-pipeline-test-stages (the test stages as built-ins: Count, Delay, FailAt, ...).
set -uo pipefail
bin=$(realpath "$1")  # the test cds into its scratch directory
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expect() {  # expect NAME EXPECTED_STATUS EXPECTED_LINE -- COMMAND...
  local name=$1 status=$2 line=$3
  shift 4
  timeout 60 "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -ne "$status" ]; then
    echo "FAIL $name: exit $got, expected $status"; head -c 2000 "$work/out"; echo
    failures=$((failures + 1)); return
  fi
  if [ -n "$line" ] && ! grep -qxF -- "$line" "$work/out"; then
    echo "FAIL $name: missing line: $line"; head -c 2000 "$work/out"; echo
    failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

cores=$(getconf _NPROCESSORS_ONLN)
limit=$((4 * cores))
mkdir -p "$work/configs" "$work/pipelines"
cd "$work"
pipeline() {  # pipeline FILE PARAMS [INCLUDE]: a Count -> Delay pipeline
  printf '{"version": 1, "name": "t", "include": %s, "settings": {"threads": 2},\n "nodes": [{"id": "src", "type": "Count", "params": %s},\n  {"id": "delay", "type": "Delay", "inputs": ["src"]}]}\n' \
    "${3:-{\}}" "$2" >"$1"
}
pipeline pipelines/ok.json '{"count": 5}'

# Command line.
expect "a valid run" 0 "" -- "$bin" run pipelines/ok.json
expect "an unknown subcommand is named" 2 \
  'unknown subcommand "frobnicate" (allowed: describe, graph, report, run, stages, validate)' -- "$bin" frobnicate
expect "an unknown subcommand gets a suggestion" 2 \
  'unknown subcommand "rnu"; did you mean "run"? (allowed: describe, graph, report, run, stages, validate)' \
  -- "$bin" rnu pipelines/ok.json
expect "--threads beyond the cores" 2 \
  "--threads: must be between 0 and $limit (4 x the $cores hardware threads), got 100000" \
  -- "$bin" run pipelines/ok.json --threads 100000
expect "--threads beyond an int" 2 \
  "--threads: must be between 0 and $limit (4 x the $cores hardware threads), got 2147483648" \
  -- "$bin" run pipelines/ok.json --threads 2147483648
expect "--threads beyond int64" 2 \
  "--threads: must be an integer between 0 and $limit, got 99999999999999999999" \
  -- "$bin" run pipelines/ok.json --threads 99999999999999999999
expect "settings.threads beyond the cores" 2 \
  "pipelines/ok.json:/settings/threads: must be between 0 and $limit (4 x the $cores hardware threads), got 100000" \
  -- "$bin" run pipelines/ok.json --set settings.threads=100000
expect "--stats-out in a missing directory, before the run" 2 \
  "--stats-out: directory $work/missing does not exist" \
  -- "$bin" run pipelines/ok.json --stats-out "$work/missing/stats.json"
expect "--set with an absurd index" 2 \
  '--set nodes.99999999999999999999999.params.count=1: no element "99999999999999999999999" in nodes (2 elements)' \
  -- "$bin" validate pipelines/ok.json --set nodes.99999999999999999999999.params.count=1
expect "--set with a number out of range" 2 \
  "--set settings.seed=1e309: number 1e309 is out of range (a double holds at most 1.8e308)" \
  -- "$bin" validate pipelines/ok.json --set settings.seed=1e309
expect "an integer param out of range" 2 \
  "pipelines/ok.json:/nodes/0/params/count [src: Count]: out of range: 1e+20 does not fit in a 64-bit integer" \
  -- "$bin" run pipelines/ok.json --set nodes.src.params.count=1e20

# Files.
printf '{"version": 1,\n "settings": {"seed": 1e309}}\n' >pipelines/overflow.json
expect "a number out of range names line and column" 2 \
  "pipelines/overflow.json:2:23: number 1e309 is out of range (a double holds at most 1.8e308)" \
  -- "$bin" validate pipelines/overflow.json
/usr/bin/python3 -c "print('{\"x\": ' + '[' * 9000 + ']' * 9000 + '}')" >pipelines/deep.json
expect "deep nesting is refused where it starts" 2 \
  "pipelines/deep.json:1:262: JSON nested deeper than 256 levels" -- "$bin" validate pipelines/deep.json
expect "a directory as the pipeline" 2 "pipelines: cannot read file: not a regular file (a directory)" \
  -- "$bin" validate pipelines
pipeline pipelines/zero.json '{}' '{"z": "/dev/zero"}'
expect "an include of /dev/zero" 2 \
  "pipelines/zero.json:/include/z: cannot read included file /dev/zero: not a regular file (a character device)" \
  -- "$bin" validate pipelines/zero.json
mkfifo configs/fifo.json
pipeline pipelines/fifo.json '{}' '{"f": "configs/fifo.json"}'
expect "an include of a FIFO does not hang" 2 \
  "pipelines/fifo.json:/include/f: cannot read included file configs/fifo.json: not a regular file (a FIFO)" \
  -- "$bin" validate pipelines/fifo.json
printf '{"a": {"$ref": "c/b"}, "b": {"n": {"$ref": "c/a"}}}\n' >configs/cycle.json
pipeline pipelines/cycle.json '{"count": {"$ref": "c/a"}}' '{"c": "configs/cycle.json"}'
expect "a \$ref cycle is named" 2 \
  'pipelines/cycle.json:/nodes/0/params/count/n/$ref: $ref cycle: c/a -> c/b -> c/a (configs/cycle.json refers back to a value that contains the reference)' \
  -- "$bin" validate pipelines/cycle.json
pipeline pipelines/self.json '{}' '{"self": "pipelines/self.json"}'
expect "a pipeline including itself" 2 \
  "pipelines/self.json:/include/self: the pipeline includes itself; include config fragments (configs/...), which hold values, not pipelines" \
  -- "$bin" validate pipelines/self.json
/usr/bin/python3 -c "print('{\"version\": 1, \"name\": \"t\", \"nodes\": [{\"id\": \"' + 'n' * 50000 + '\", \"type\": \"Count\", \"params\": {\"count\": \"\${WAM_UNSET_X:-' + 'd' * 50000 + '}\"}}]}')" >pipelines/long.json
expect "long strings are scanned without regex" 2 \
  "pipelines/long.json:/nodes/0/params/count [$(printf 'n%.0s' $(seq 50000)): Count]: expected int, got string" \
  -- "$bin" validate pipelines/long.json

# Derived pipelines (extends): the resolved result, and a bad patch named by file and pointer.
printf '{"extends": "ok.json", "name": "derived", "nodes": {"src": {"params": {"count": 7}}}}\n' \
  >pipelines/derived.json
expect "validate --print-config shows the patched node" 0 '        "count": 7,' \
  -- "$bin" validate pipelines/derived.json --print-config
printf '{"extends": "ok.json", "name": "bad", "nodes": {"srcs": {"params": {"count": 7}}}}\n' \
  >pipelines/bad_patch.json
expect "a patch naming no node of the base" 2 \
  'pipelines/bad_patch.json:/nodes/srcs: no node "srcs" in the base pipeline pipelines/ok.json; did you mean "src"? (nodes: src, delay)' \
  -- "$bin" validate pipelines/bad_patch.json
printf '{"extends": "missing.json", "name": "m"}\n' >pipelines/no_base.json
expect "a missing base" 2 \
  'pipelines/no_base.json:/extends: base pipeline pipelines/missing.json does not exist' \
  -- "$bin" validate pipelines/no_base.json

# Stages and signals.
expect "a failing stage is exit 1" 1 \
  'error: [fail: FailAt] process item:3: corrupt input at value 3' \
  -- "$bin" run pipelines/ok.json --set 'nodes=[{"id": "src", "type": "Count"}, {"id": "fail", "type": "FailAt", "inputs": ["src"], "params": {"at": 3}}]'
# Error text quoting bytes that are not UTF-8 (a garbage cache catalog) once made --stats-out throw
# a raw JSON library error; they are written as U+FFFD.
printf 'damaged \377 catalog' >"$work/bytes.txt"
expect "an error that is not UTF-8 still writes --stats-out" 1 "wrote $work/bytes.json" \
  -- "$bin" run pipelines/ok.json --stats-out "$work/bytes.json" --set 'nodes=[{"id": "src", "type": "Count"}, {"id": "fail", "type": "FailAt", "inputs": ["src"], "params": {"at": 3, "message_file": "'"$work"'/bytes.txt"}}]'
if /usr/bin/python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['error'] == '[fail: FailAt] process item:3: damaged \ufffd catalog' else 1)" "$work/bytes.json"; then
  echo "ok   the stats file shows the bytes as U+FFFD"
else
  echo "FAIL the stats file shows the bytes as U+FFFD"; cat "$work/bytes.json"; failures=$((failures + 1))
fi
pipeline pipelines/slow.json '{"count": 1000000000}'
sed -i 's/"type": "Delay"/"type": "Delay", "params": {"max_us": 2000}/' pipelines/slow.json
for signal in INT TERM; do
  status=$([ $signal = INT ] && echo 130 || echo 143)
  "$bin" run pipelines/slow.json --stats-out "$work/$signal.json" >"$work/$signal.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -qs '^running' "$work/$signal.log" && break; sleep 0.1; done
  sleep 1
  kill -$signal $pid
  wait $pid
  got=$?
  if [ "$got" -eq "$status" ] && grep -qxF "stopped by SIG$signal" "$work/$signal.log" &&
     grep -q '^pipeline t:' "$work/$signal.log" &&
     /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s['stop_reason'] == 'interrupted' and s['signal'] == 'SIG$signal' else 1)" "$work/$signal.json"; then
    echo "ok   SIG$signal: exit $status, summary and --stats-out written"
  else
    echo "FAIL SIG$signal: exit $got, expected $status"; cat "$work/$signal.log"
    cat "$work/$signal.json" 2>/dev/null; failures=$((failures + 1))
  fi
done

echo "$failures failed"
[ "$failures" -eq 0 ]
