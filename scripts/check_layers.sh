#!/usr/bin/env bash
# Checks that modules depend one way only, as CMakeLists.txt layers them:
#   base <- shard, image <- loader <- train, python; shard, image <- ingest;
#   tools/ and tests on top.
# A module's sources may include its own headers and those of the modules it
# lists below; anything else is reported as FILE:LINE and the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [base]="base"
  [shard]="base shard"
  [image]="base image"
  [loader]="base shard image loader"
  [train]="base shard image loader train"
  [ingest]="base shard image ingest"
  [python]="base shard image loader"
)
status=0
for module in "${!allowed[@]}"; do
  files=$(git ls-files "$module/*.cc" "$module/*.h" 2>/dev/null || true)
  [ -n "$files" ] || continue
  # Includes of the form "dir/...": the project's own headers.
  while IFS=: read -r file line dep; do
    ok=0
    for a in ${allowed[$module]}; do [ "$dep" = "$a" ] && ok=1; done
    if [ $ok = 0 ]; then
      echo "$file:$line: $module/ includes $dep/ (allowed: ${allowed[$module]})"
      status=1
    fi
  done < <(grep -Hn '^#include "[a-z_]*/' $files | sed -E 's|^([^:]*):([0-9]+):#include "([a-z_]*)/.*|\1:\2:\3|')
done
[ $status = 0 ] && echo "layers: every module includes only the modules below it"
exit $status
