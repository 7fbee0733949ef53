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
expect "version flag" 0 "wam-pipeline 0.1.0" -- "$bin" --version
expect "describe unknown type" 2 \
  "unknown stage type \"Colate\"; did you mean \"Collate\"? (allowed: $("$bin" stages | awk '{print $1}' | paste -sd, - | sed 's/,/, /g'))" \
  -- "$bin" describe Colate
expect "custom stage registers beside the built-ins" 0 \
  "Brightness          stage   Scales a video tensor by a constant gain." -- "$custom_bin" stages
expect "custom stage describes its params" 0 \
  '  gain   number  1.1      [>= 0, <= 4] Multiplier applied to the video.' -- "$custom_bin" describe Brightness
for pipeline in pipelines/*.json; do
  expect "validate $pipeline" 0 "" -- "$bin" validate "$pipeline"
  expect "graph $pipeline" 0 "" -- "$bin" graph "$pipeline" -o "$work/graph.dot"
  grep -q '^digraph' "$work/graph.dot" || { echo "FAIL graph $pipeline: no digraph"; failures=$((failures + 1)); }
done

echo "$failures failed"
[ "$failures" -eq 0 ]
