#!/usr/bin/env bash
# Checks that the C++ lines changed since a base follow .clang-format: clang-format --dry-run
# -Werror on each changed .cc/.h/.cu file, restricted to its changed lines (--lines), so that files
# not yet formatted as a whole converge as they are edited, without reformatting commits.
#
# Usage: scripts/check-format.sh [BASE]
#   BASE: a commit or branch. Default: $WAM_FORMAT_BASE, else origin/main when it exists, else
#   HEAD~1 (the last commit's changes). Changes run from the merge base of BASE and HEAD to the
#   working tree, so uncommitted edits count too; untracked C++ files are checked whole.
# Fix what it reports with: clang-format -i FILE (or git clang-format BASE for changed lines).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is missing; run scripts/setup.sh" >&2
  exit 2
fi

base=${1:-${WAM_FORMAT_BASE:-}}
if [ -z "$base" ]; then
  if git rev-parse -q --verify origin/main >/dev/null; then
    base=origin/main
  elif git rev-parse -q --verify HEAD~1 >/dev/null; then
    base=HEAD~1
  fi
fi
if [ -n "$base" ]; then
  from=$(git merge-base "$base" HEAD)
else
  from=$(git hash-object -t tree /dev/null)  # the first commit: every line is new
fi

files=0
failed=0
check() {
  files=$((files + 1))
  clang-format --dry-run -Werror "$@" || failed=$((failed + 1))
}

while IFS= read -r -d '' file; do
  [ -f "$file" ] || continue
  # Hunk headers "@@ -a,b +start[,count] @@": the new side's lines; count 0 is a pure deletion.
  ranges=()
  while read -r start count; do
    [ "$count" -gt 0 ] && ranges+=("--lines=$start:$((start + count - 1))")
  done < <(git diff -U0 --no-color "$from" -- "$file" |
    sed -n 's/^@@ -[0-9,]* +\([0-9]*\)\(,\([0-9]*\)\)\{0,1\} @@.*/\1 \3/p' |
    awk '{ print $1, ($2 == "" ? 1 : $2) }')
  [ ${#ranges[@]} -gt 0 ] && check "${ranges[@]}" "$file"
done < <(git diff --name-only --diff-filter=ACMR -z "$from" -- '*.cc' '*.h' '*.cu')

while IFS= read -r -d '' file; do
  check "$file"
done < <(git ls-files --others --exclude-standard -z -- '*.cc' '*.h' '*.cu')

if [ "$failed" -gt 0 ]; then
  echo "check-format: $failed of $files changed C++ files break .clang-format in changed lines" \
       "(since ${base:-the first commit})" >&2
  exit 1
fi
echo "check-format: the changed lines of $files C++ files follow .clang-format" \
     "(since ${base:-the first commit})"
