#!/usr/bin/env bash
# The command line warns, naming the library and what to do, when std::filesystem runs from a
# LibTorch library rather than libstdc++ (wam/library_binding.h), and says nothing otherwise.
#   filesystem_binding_test.sh WAM_CLI TORCH_STANDIN_LIBRARY
set -uo pipefail
cli=$1 standin=$2
failures=0
check() {  # NAME EXPECTED_STDERR_LINE_OR_EMPTY [ENV...]
  local name=$1 expected=$2
  shift 2
  local stderr
  stderr=$(env "$@" "$cli" stages 2>&1 >/dev/null)
  if [ "$stderr" = "$expected" ]; then
    echo "ok   $name"
  else
    echo "FAIL $name: expected stderr \"$expected\", got \"$stderr\""
    failures=$((failures + 1))
  fi
}
check "libstdc++ first: no warning" ""
check "LibTorch's copy first: the warning" \
  "wam-pipeline: warning: std::filesystem runs from $standin, not libstdc++: this binary lists LibTorch ahead of libstdc++ among its shared libraries, and files it writes may crash it (docs/RELIABILITY.md, \"Linking against LibTorch\"). Link it through wam_tensor, whose link options put libstdc++ first, or run it with LD_PRELOAD=libstdc++.so.6" \
  "LD_PRELOAD=$standin"
exit $((failures > 0))
