#!/usr/bin/env bash
# Each binary given lists libstdc++ among its shared libraries before any of LibTorch's, so that
# its std::filesystem calls bind to libstdc++ and not to the copies LibTorch exports (the link
# option in CMakeLists.txt; docs/RELIABILITY.md, "Linking against LibTorch"), or has libstdc++
# linked in (a toolchain that passes -static-libstdc++, as the GPU image's does): then it imports
# no std::filesystem symbol at all.
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
  elif [ -z "$stdcxx" ]; then
    imported=$(readelf --dyn-syms -W "$binary" | awk '$7 == "UND" {print $8}' |
      grep -E '^_ZN?K?St10filesystem' | head -3 | xargs)
    if [ -n "$imported" ]; then
      echo "FAIL $name: libstdc++ is not among its shared libraries, yet it imports std::filesystem" \
        "symbols ($imported), which LibTorch's copies would answer"
      failures=$((failures + 1))
    else
      echo "ok   $name: libstdc++ is linked into it (no std::filesystem symbol imported)"
    fi
  elif [ "$stdcxx" -gt "$torch" ]; then
    echo "FAIL $name: libstdc++ is not before LibTorch among its shared libraries: $(echo $needed)"
    failures=$((failures + 1))
  else
    echo "ok   $name: libstdc++ is shared library $stdcxx, LibTorch's first $torch"
  fi
done
exit $((failures > 0))
