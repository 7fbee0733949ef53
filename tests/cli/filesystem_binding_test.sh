#!/usr/bin/env bash
# Where std::filesystem runs from a LibTorch library rather than libstdc++ (wam/library_binding.h),
# the command line restarts itself once with libstdc++ preloaded ahead of it, saying so, and then
# runs normally; with that restart already made (WAM_LIBSTDCXX_PRELOADED) it warns instead. With
# libstdc++ first it says nothing.
#   filesystem_binding_test.sh WAM_CLI TORCH_STANDIN_LIBRARY
set -uo pipefail
cli=$1 standin=$2
failures=0
what="std::filesystem runs from $standin, not libstdc++"
reference='docs/RELIABILITY.md, "Linking against LibTorch"'
check() {  # NAME EXPECTED_STDERR [ENV...]
  local name=$1 expected=$2
  shift 2
  local stderr stdout
  stdout=$(env "$@" "$cli" stages 2>"$work_err")
  stderr=$(cat "$work_err")
  if [ "$stderr" != "$expected" ]; then
    echo "FAIL $name: expected stderr \"$expected\", got \"$stderr\""
    failures=$((failures + 1))
  elif [ -z "$stdout" ]; then
    echo "FAIL $name: \`stages\` printed nothing"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}
work_err=$(mktemp)
trap 'rm -f "$work_err"' EXIT
check "libstdc++ first: nothing said" ""
check "LibTorch's copy first: one restart with libstdc++ preloaded" \
  "wam-pipeline: $what ($reference): restarting with LD_PRELOAD=libstdc++.so.6" \
  "LD_PRELOAD=$standin"
check "after the restart: the warning" \
  "wam-pipeline: warning: $what: this binary lists LibTorch ahead of libstdc++ among its shared libraries, and files it writes may crash it ($reference). Link it through wam_tensor, whose link options put libstdc++ first, or run it with LD_PRELOAD=libstdc++.so.6" \
  "LD_PRELOAD=$standin" WAM_LIBSTDCXX_PRELOADED=1
exit $((failures > 0))
