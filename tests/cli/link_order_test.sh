#!/usr/bin/env bash
# Each binary given lists libstdc++ among its shared libraries before any of LibTorch's, so that
# its std::filesystem calls bind to libstdc++ and not to the copies LibTorch exports (the link
# option in CMakeLists.txt; docs/RELIABILITY.md, "Linking against LibTorch").
#   link_order_test.sh BINARY...
set -uo pipefail
failures=0
for binary in "$@"; do
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  stdcxx=$(grep -n '^libstdc++\.so' <<<"$needed" | head -1 | cut -d: -f1)
  torch=$(grep -nE '^lib(torch|c10)' <<<"$needed" | head -1 | cut -d: -f1)
  name=$(basename "$binary")
  if [ -z "$torch" ]; then
    echo "FAIL $name: links no LibTorch library; shared libraries: $(echo $needed)"
    failures=$((failures + 1))
  elif [ -z "$stdcxx" ] || [ "$stdcxx" -gt "$torch" ]; then
    echo "FAIL $name: libstdc++ is not before LibTorch among its shared libraries: $(echo $needed)"
    failures=$((failures + 1))
  else
    echo "ok   $name: libstdc++ is shared library $stdcxx, LibTorch's first $torch"
  fi
done
exit $((failures > 0))
