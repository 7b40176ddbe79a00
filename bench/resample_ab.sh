#!/usr/bin/env bash
# The resampler of commit OLD against this tree's, in one process and in the
# loader's conditions: builds each side's image/image.cc and
# image/resample_gather.cc (OLD's with its own image/ headers) into a shared
# object with bench/resample_ab.cc, at the build's flags for those files
# (-O3, -ffp-contract=off), and runs build/bench/resample_ab, which decodes
# each sample as the loader does and times both sides' resample of the fresh
# decode, alternating (see bench/resample_ab_main.cc). Prints a table per
# transform: microseconds per image, new/old, and whether both wrote the
# same bytes (exit 1 if not). Finer than bench/compare_commits.sh: the
# resample alone, free of the decode's noise, and no build of OLD.
# usage: bench/resample_ab.sh OLD [OUT]   (env: ROUNDS=7 SAMPLES=1024 PER_CLASS=150)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/resample_ab.sh OLD [OUT]" >&2; exit 2; }
OLD=$1
OUT=${2:-out/resample-ab}
git rev-parse --verify -q "$OLD^{commit}" > /dev/null || { echo "resample_ab: error: no commit '$OLD'" >&2; exit 2; }
source scripts/deps.sh
[ -x build/bench/resample_ab ] && [ -x build/tools/pack/shardkit-pack ] || shardkit_build build
mkdir -p "$OUT"
rm -rf "$OUT/old" && mkdir -p "$OUT/old/image"
for f in image.cc image.h resample_gather.cc resample_gather.h; do
  if ! git show "$OLD:image/$f" > "$OUT/old/image/$f" 2> /dev/null; then
    case $f in
      resample_gather.*) rm -f "$OUT/old/image/$f" ;;  # older resamplers had no gather kernels
      *) echo "resample_ab: error: $OLD has no image/$f" >&2; exit 2 ;;
    esac
  fi
done
side() {  # name include-dir sources...
  local name=$1 inc=$2; shift 2
  "${CXX:-g++}" -O3 -DNDEBUG -std=c++17 -fPIC -shared -ffp-contract=off -Wno-psabi \
    -Dshardkit=shardkit_ab_$name -I"$inc" -I. -Wl,-Bsymbolic "$@" bench/resample_ab.cc \
    -o "$OUT/$name.so"
}
side old "$OUT/old" "$OUT"/old/image/*.cc
side new . image/image.cc image/resample_gather.cc
source bench/jpeg_set.sh
bench_jpeg_shards "$OUT/jpeg-tree" "$OUT/jpeg-shards" "${PER_CLASS:-150}"
echo "== resample: $OLD ($(git rev-parse --short "$OLD")) against this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- image || echo ', changed')), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for t in train val; do
  build/bench/resample_ab "$OUT/old.so" "$OUT/new.so" "$OUT/jpeg-shards" --transform "$t" \
    --rounds "${ROUNDS:-7}" --samples "${SAMPLES:-1024}" | grep -v '^round' || status=$?
done
exit $status
