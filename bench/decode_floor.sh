#!/usr/bin/env bash
# The JPEG path on one core against its decode floor, in one run: for the
# train transform (RandomResizedCrop 224 + flip) and the val transform
# (Resize 256 + CenterCrop 224), build/bench/decode_floor times the floor
# (each crop's rows and columns decoded at the DCT scale the loader picks,
# nothing else), decode + resample without a loader, and the Loader with one
# worker, alternating in every round, on an ImageNet-shaped set cut from real
# photographs (scripts/make_jpeg_set.py).
#
# With PROFILE=1 it also counts instructions per image of each side under
# valgrind --tool=callgrind (which a busy machine does not change; valgrind
# runs the AVX2 kernels, having no AVX-512), on a 204-image subset, and
# prints where they go: libjpeg, the resampler, the rest.
#
# usage: bench/decode_floor.sh [OUT]   (env: ROUNDS=5 PER_CLASS=150 PROFILE=0)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/decode-floor}
ROUNDS=${ROUNDS:-5}
PER_CLASS=${PER_CLASS:-150}
PROBE=build/bench/decode_floor
PACK=build/tools/pack/shardkit-pack
PY=/usr/bin/python3
source scripts/deps.sh
shardkit_install_deps mate-backgrounds python3-skimage
[ -x "$PROBE" ] && [ -x "$PACK" ] || shardkit_build build
mkdir -p "$OUT"

source bench/jpeg_set.sh
bench_jpeg_shards "$OUT/jpeg-tree" "$OUT/jpeg-shards" "$PER_CLASS"
echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for t in train val; do
  echo "== $t transform"
  $PROBE "$OUT/jpeg-shards" --transform "$t" --rounds "$ROUNDS" | tee "$OUT/$t.txt"
done

[ "${PROFILE:-0}" = 1 ] || exit 0
command -v valgrind > /dev/null || shardkit_install_deps valgrind
bench_jpeg_shards "$OUT/jpeg-small-tree" "$OUT/jpeg-small" 12
for t in train val; do
  for side in floor decode loader; do
    f="$OUT/callgrind.$t.$side"
    # In order (--shuffle none): the floor and decode sides then need no loader pass.
    valgrind --tool=callgrind --callgrind-out-file="$f" "$PROBE" "$OUT/jpeg-small" --transform "$t" \
      --rounds 1 --shuffle none --only "$side" > "$f.log" 2>&1
  done
  # Two passes over the set per run (the untimed one and a round): per image.
  images=$(grep -o '[0-9]* samples per round' "$OUT/callgrind.$t.floor.log" | cut -d' ' -f1)
  echo "== $t: instructions per image under callgrind ($images images, AVX2 kernels)"
  for side in floor decode loader; do
    callgrind_annotate "$OUT/callgrind.$t.$side" 2> /dev/null | $PY -c '
import re, sys
side, images = sys.argv[1], 2 * int(sys.argv[2])
groups = {"libjpeg": 0, "resample": 0, "libc": 0, "other": 0}
total = 0
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
    if not m:
        continue
    n, where = int(m.group(1).replace(",", "")), m.group(2)
    if "PROGRAM TOTALS" in where:
        total = n
        continue
    if "libjpeg" in where or "libturbojpeg" in where:
        groups["libjpeg"] += n
    elif "resample::" in where or "RowsTo" in where or "Transpose" in where or "Coefficients" in where \
            or "Resample" in where or "Interleave" in where:
        groups["resample"] += n
    elif "libc.so" in where:
        groups["libc"] += n
    else:
        groups["other"] += n
print("%-7s %6.2f M instructions/image: %s" % (side, total / images / 1e6, ", ".join(
    "%s %.2f M" % (k, v / images / 1e6) for k, v in groups.items())))
' "$side" "$images"
  done
done
