#!/usr/bin/env bash
# Checks that modules depend one way only, as CMakeLists.txt layers them:
#   base <- storage <- shard; base <- image; shard, image <- loader <- train,
#   python; shard, image <- ingest; storage/remote is storage's inside;
#   tools/ on top: tools/common (base only), and each tool over the library
#   modules it links and tools/common, never another tool's directory.
# A module's sources may include its own headers and those of the modules it
# lists below; anything else is reported as FILE:LINE and the script fails, as
# it does for a source directory outside tests/ that the table does not name
# (a new module or tool: add its line). tests/ are on top of everything and
# not checked.
# The API is the headers cmake/public_headers.txt lists (what is installed):
# a public header includes only public headers (so an installed tree compiles
# on its own), and tools/ and python/ include only public headers of the
# library (and their own). bench/'s probes measure the stages themselves and
# may include a module's inside.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [base]="base"
  [storage]="base storage"
  [shard]="base storage shard"
  [image]="base image"
  [loader]="base storage shard image loader"
  [train]="base storage shard image loader train"
  [ingest]="base storage shard image ingest"
  [python]="base storage shard image loader python"
  # Benchmark probes built against a build's libraries (bench/open_scale.sh).
  [bench]="base storage shard image loader"
  # The tools' shared helpers: flags, the progress line, plots. Nothing of the
  # library but base and storage (output files), so that any tool can use them.
  [tools/common]="base storage tools/common"
  # The packer and the augmenter go through ingest/ and never the loader.
  [tools/pack]="base storage shard image ingest tools/common tools/pack"
  [tools/augment]="base storage shard image ingest tools/common tools/augment"
  [tools/bench]="base storage shard image loader tools/common tools/bench"
  # The scaling report of a training sweep (slurm/report).
  [tools/report]="base storage tools/common tools/report"
  [tools/train]="base storage shard image loader train tools/common tools/train"
)
# A path's module, into $mod: its top directory, or tools/NAME.
module_of() {
  case $1 in
    tools/*/*) mod=${1#tools/}; mod=tools/${mod%%/*} ;;
    */*) mod=${1%%/*} ;;
    *) mod=. ;;
  esac
}
status=0
declare -A public=()
while read -r header; do
  public[$header]=1
  [ -f "$header" ] || { echo "cmake/public_headers.txt: $header does not exist"; status=1; }
done < <(grep -E '^[a-z]' cmake/public_headers.txt)
declare -A unknown=()
files=$(git ls-files '*.cc' '*.h' ':!:tests/')
for file in $files; do
  module_of "$file"
  [ -n "${allowed[$mod]+set}" ] || unknown[$mod]=1
done
# Includes of the form "dir/...": the project's own headers.
while IFS=: read -r file line path; do
  module_of "$file"
  module=$mod
  [ -n "${allowed[$module]+set}" ] || continue
  module_of "$path"
  case " ${allowed[$module]} " in
    *" $mod "*) ;;
    *)
      echo "$file:$line: $module/ includes $mod/ (allowed: ${allowed[$module]})"
      status=1
      continue
      ;;
  esac
  case $module:$mod in
    tools/*:tools/* | python:python) continue ;;   # a tool's or the binding's own helpers
    tools/*:* | python:*) what="$module/" ;;       # the library's API only
    *) [ -n "${public[$file]+set}" ] || continue   # a module's inside
       what="public header" ;;
  esac
  if [ -z "${public[$path]+set}" ]; then
    echo "$file:$line: $what includes $path, which is not public (cmake/public_headers.txt)"
    status=1
  fi
done < <(grep -Hn '^#include "[a-z_]*/' $files | sed -E 's|^([^:]*):([0-9]+):#include "([^"]*)".*|\1:\2:\3|')
for module in "${!unknown[@]}"; do
  echo "$module/: sources that scripts/check_layers.sh does not know; add the module to its table"
  status=1
done
[ $status = 0 ] && echo "layers: every module includes only the modules below it (tools/ too)," \
  "and public headers, tools/ and python/ only public headers"
exit $status
