#!/usr/bin/env bash
# Packing ImageNet from its archive against extracting it first, side by side
# on the same data: a tar of per-class tars (ILSVRC2012_img_train.tar's
# layout) made from real photographs, then
#   A: shardkit-pack imagenet train.tar OUT          (streamed, no extraction)
#   B: tar -xf train.tar; for each class tar: mkdir, tar -xf, rm;
#      shardkit-pack imagenet tree OUT               (what the studies' scripts do)
# ROUNDS times, alternating, with train.tar dropped from the page cache
# before each run (dd iflag=nocache: posix_fadvise DONTNEED), and prints the
# best of each and their ratios. The two datasets are compared record by record.
# Then the many-members case: a tar of 100,000 small JPEGs (100 class folders),
# shardkit-pack on it against tar -xf of it alone.
#   bench/archive_pack.sh [PER_CLASS=400] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
PER_CLASS=${1:-400}
ROUNDS=${2:-3}
pack=build/tools/pack/shardkit-pack
[ -x "$pack" ] || { echo "archive_pack: build first (cmake --build build)" >&2; exit 2; }
command -v bc >/dev/null || { echo "archive_pack: needs bc (apt-get install bc)" >&2; exit 2; }
work=${WORK:-out/archive_bench}
rm -rf "$work" && mkdir -p "$work"
"${PYTHON:-/usr/bin/python3}" scripts/make_jpeg_set.py "$work/src" --per-class "$PER_CLASS" >/dev/null
(cd "$work/src" && for c in *; do tar -cf "../$c.tar" -C "$c" .; done)
(cd "$work" && tar -cf train.tar n*.tar && rm -f n*.tar)
size=$(du -sh "$work/train.tar" | cut -f1)
files=$(find "$work/src" -type f | wc -l)
rm -rf "$work/src"
drop() { dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || true; }  # posix_fadvise DONTNEED
best_a=999999 best_b=999999
for r in $(seq "$ROUNDS"); do
  drop "$work/train.tar"
  rm -rf "$work/a"
  t0=$(date +%s.%N)
  "$pack" imagenet "$work/train.tar" "$work/a" --threads 0 >/dev/null 2>&1
  t1=$(date +%s.%N)
  a=$(echo "$t1 - $t0" | bc)
  drop "$work/train.tar"
  rm -rf "$work/tree" "$work/b" && mkdir -p "$work/tree"
  t0=$(date +%s.%N)
  tar -xf "$work/train.tar" -C "$work/tree"
  for t in "$work"/tree/*.tar; do c=${t%.tar}; mkdir -p "$c"; tar -xf "$t" -C "$c"; rm -f "$t"; done
  t1=$(date +%s.%N)
  "$pack" imagenet "$work/tree" "$work/b" --threads 0 >/dev/null 2>&1
  t2=$(date +%s.%N)
  b=$(echo "$t2 - $t0" | bc)
  x=$(echo "$t1 - $t0" | bc)
  printf 'round %d: archive %.2f s | extract %.2f s + pack tree %.2f s = %.2f s\n' "$r" "$a" "$x" "$(echo "$t2 - $t1" | bc)" "$b"
  best_a=$(echo "if ($a < $best_a) $a else $best_a" | bc)
  best_b=$(echo "if ($b < $best_b) $b else $best_b" | bc)
  best_x=${best_x:-$x}; best_x=$(echo "if ($x < $best_x) $x else $best_x" | bc)
done
same=$("${PYTHON:-/usr/bin/python3}" - "$work/a" "$work/b" <<'PY'
import sys; sys.path.insert(0, "build/python")
import shardkit as sk
a, b = sk.Dataset(sys.argv[1]), sk.Dataset(sys.argv[2])
print("identical" if a.classes == b.classes and len(a) == len(b) and all(a[i] == b[i] and a.key(i) == b.key(i) for i in range(len(a))) else "DIFFERENT")
PY
)
echo
echo "| $files JPEGs, train.tar $size, $(nproc) cores | best of $ROUNDS |"
echo "|---|---:|"
printf '| shardkit-pack imagenet train.tar | %.2f s |\n' "$best_a"
printf '| tar -xf (outer + class tars) | %.2f s |\n' "$best_x"
printf '| tar -xf + shardkit-pack imagenet tree | %.2f s |\n' "$best_b"
printf '| archive / extraction alone | %.2fx |\n' "$(echo "$best_a / $best_x" | bc -l)"
printf '| archive / extraction + pack | %.2fx |\n' "$(echo "$best_a / $best_b" | bc -l)"
echo "datasets: $same"

# ---- 100,000 small members: no cost per member that grows with their count.
"${PYTHON:-/usr/bin/python3}" - "$work/many.tar" <<'PY'
import io, sys, tarfile
from PIL import Image
buf = io.BytesIO()
Image.new("RGB", (16, 16), (90, 140, 30)).save(buf, format="JPEG", quality=80)
data = buf.getvalue()
with tarfile.open(sys.argv[1], "w") as t:
    for i in range(100000):
        info = tarfile.TarInfo("train/c%03d/%06d.JPEG" % (i % 100, i))
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
PY
best_m=999999 best_t=999999
for r in $(seq "$ROUNDS"); do
  drop "$work/many.tar"
  rm -rf "$work/m"
  t0=$(date +%s.%N)
  "$pack" imagenet "$work/many.tar" "$work/m" --threads 0 >/dev/null 2>&1
  t1=$(date +%s.%N)
  drop "$work/many.tar"
  rm -rf "$work/mx" && mkdir -p "$work/mx"
  tar -xf "$work/many.tar" -C "$work/mx"
  t2=$(date +%s.%N)
  m=$(echo "$t1 - $t0" | bc) t=$(echo "$t2 - $t1" | bc)
  printf 'round %d: 100,000 members: shardkit-pack %.2f s | tar -xf %.2f s\n' "$r" "$m" "$t"
  best_m=$(echo "if ($m < $best_m) $m else $best_m" | bc)
  best_t=$(echo "if ($t < $best_t) $t else $best_t" | bc)
done
rm -rf "$work/mx"
echo
echo "| 100,000 members of $(stat -c %s "$work/many.tar" | awk '{printf "%.0f MB", $1/1e6}') | best of $ROUNDS |"
echo "|---|---:|"
printf '| shardkit-pack imagenet many.tar | %.2f s |\n' "$best_m"
printf '| tar -xf many.tar | %.2f s |\n' "$best_t"
printf '| pack / extraction alone | %.2fx |\n' "$(echo "$best_m / $best_t" | bc -l)"
