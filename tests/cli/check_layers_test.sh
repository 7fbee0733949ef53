#!/usr/bin/env bash
# scripts/check-layers.sh on a scratch tree that breaks each of its rules once: the exact lines it
# prints, and a clean tree passing. Usage: check_layers_test.sh (run from the source root).
set -uo pipefail
script=$(realpath scripts/check-layers.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
git init -q
mkdir -p scripts core/include/wam core/src core/cli stages/common stages/data tests/fuzz
cp "$script" scripts/
printf '#pragma once\n' >core/include/wam/sample.h
printf '#pragma once\n' >core/cli/app.h
printf '#pragma once\n' >stages/common/seeding.h
printf '#pragma once\n' >stages/data/augment_params.h
printf '#include "wam/sample.h"\nint f() { return 1; }\n' >core/src/sample.cc
printf '#include "cli/app.h"\n#include "wam/sample.h"\n' >core/cli/app.cc
printf '#include "cli/app.h"\n#include "common/seeding.h"\n#include "data/augment_params.h"\n' \
  >stages/data/augment.cc
printf 'add_subdirectory(core/src)\nadd_subdirectory(core/cli)\nadd_subdirectory(stages)\n' \
  >CMakeLists.txt
printf 'add_library(wam_core STATIC sample.cc)\n' >core/src/CMakeLists.txt
printf 'add_library(wam_cli STATIC app.cc)\n' >core/cli/CMakeLists.txt
printf 'add_subdirectory(common)\nadd_subdirectory(data)\n' >stages/CMakeLists.txt
printf 'add_library(wam_data_stages OBJECT augment.cc)\n' >stages/data/CMakeLists.txt
printf 'wam_add_fuzz_target(pipeline_loader)\n' >tests/fuzz/CMakeLists.txt
printf 'int main() {}\n' >tests/fuzz/pipeline_loader_fuzz.cc
git add -A

failures=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_OUTPUT
  local got status
  got=$(scripts/check-layers.sh 2>&1)
  status=$?
  if [ "$status" -ne "$2" ] || [ "$got" != "$3" ]; then
    echo "FAIL $1: exit $status, expected $2"
    diff <(printf '%s\n' "$3") <(printf '%s\n' "$got")
    failures=$((failures + 1))
  else
    echo "ok   $1"
  fi
}
check "a tree that keeps the rules" 0 ""

printf '#include "data/augment_params.h"\n' >>core/src/sample.cc
printf '#include "cli/app.h"\n' >>core/include/wam/sample.h
printf '#include "data/augment_params.h"\n' >>stages/common/seeding.h
mkdir -p stages/extra
printf '#pragma once\n#include "data/augment_params.h"\n' >stages/extra/extra.h
printf 'file(GLOB_RECURSE WAM_STAGE_SOURCES stages/*.cc)\n' >>CMakeLists.txt
printf 'list(FILTER WAM_STAGE_SOURCES EXCLUDE REGEX "x")\n' >>CMakeLists.txt
printf 'int g() { return 2; }\n' >stages/data/collate.cc
printf 'add_library(wam_collate OBJECT stages/data/collate.cc)\n' >>CMakeLists.txt
{
  printf 'namespace wam {\n// a { brace in a comment\nclass Long {\n public:\n  int run() const {\n'
  printf '    const char* text = "}}}";\n'
  for i in $(seq 97); do printf '    (void)%d;\n' "$i"; done
  printf '    return 0;\n  }\n};\n}  // namespace wam\n'
} >stages/data/long.cc
printf 'add_library(wam_long OBJECT long.cc)\n' >>stages/data/CMakeLists.txt
git add -A
check "each rule broken once" 1 "core/include/wam/sample.h:2: includes core/cli/app.h: core/include, core/src must not include core/cli
core/src/sample.cc:3: includes stages/data/augment_params.h: core/include, core/src must not include stages
stages/common/seeding.h:2: includes stages/data/augment_params.h: stages/common must not include stages/data, which stages/CMakeLists.txt adds after it
stages/extra/extra.h:2: stages/extra is not added by stages/CMakeLists.txt
CMakeLists.txt:4: a file-name pattern; name the sources: file(GLOB_RECURSE WAM_STAGE_SOURCES stages/*.cc)
CMakeLists.txt:5: a file-name pattern; name the sources: list(FILTER WAM_STAGE_SOURCES EXCLUDE REGEX \"x\")
stages/data/collate.cc: not named in stages/data/CMakeLists.txt, the target of its folder
stages/data/long.cc:5: function run is 101 lines (at most 100); split it where its parts are"
sed -i 's|^ALLOWED_LONG_FUNCTIONS=()$|ALLOWED_LONG_FUNCTIONS=(stages/data/long.cc:run)|' scripts/check-layers.sh
sed -i '/GLOB_RECURSE\|FILTER\|wam_collate/d' CMakeLists.txt
printf 'add_library(wam_collate OBJECT collate.cc)\n' >>stages/data/CMakeLists.txt
sed -i '$d' core/src/sample.cc
sed -i '$d' core/include/wam/sample.h
sed -i '$d' stages/common/seeding.h
rm -r stages/extra
check "the allow-list" 0 ""

echo "$failures failed"
[ "$failures" -eq 0 ]
