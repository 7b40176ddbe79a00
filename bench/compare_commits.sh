#!/usr/bin/env bash
# Before and after, side by side in one run: builds commit OLD in a worktree
# (out/commits/OLD, tests and the Python binding off) and runs the same loader
# and training benchmarks on its binaries and on this tree's build/, alternating
# old and new in each round so that the machine's drift falls on both. Prints a
# markdown table of the median and best round per side and new/old.
#   loader: compare_pytorch.sh's shardkit side (JPEG train 224 batch 32; Fashion-
#           MNIST raw batch 256 streamed through an 8 MB block cache, and cached
#           with a full shuffle), 1 and 2 workers;
#   train:  train_compare.sh's shardkit side (ResNet-20 on Fashion-MNIST, batch
#           64, 1 rank with all cores, 2 ranks with half each).
# Before timing, it checks that both builds pack the same dataset files (shards
# byte for byte, manifests but for created_at/created_by) and that the
# loader's batches are the same bytes on both sides (tests/tools/loader_dump
# of each build, where OLD has it: the
# JPEG set with the train and val transforms, Fashion-MNIST raw, full shuffle,
# 1 and 2 workers, two epochs each), and says which configurations differ.
# usage: bench/compare_commits.sh OLD [OUT]
#   env: ROUNDS=3 STEPS=120 BATCHES=60 (JPEG) RAW_BATCHES=5000 (a raw batch takes
#        under 0.1 ms: short runs measure the VM's scheduling, not the loader)
#        JPEG_SHARDS=(packed from scripts/make_jpeg_set.py by each side's build;
#        a dataset given here must be one both builds read)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/compare_commits.sh OLD [OUT]}
OUT=${2:-out/compare-commits}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-120}
BATCHES=${BATCHES:-60}
RAW_BATCHES=${RAW_BATCHES:-5000}
F=/usr/share/datasets/fashion-mnist
PY=/usr/bin/python3
die() { echo "compare_commits: error: $*" >&2; exit 2; }
for v in ROUNDS STEPS BATCHES RAW_BATCHES; do
  [[ ${!v} =~ ^[1-9][0-9]{0,6}$ ]] || die "$v must be an integer in 1..9999999, not '${!v}'"
done
old_sha=$(git rev-parse --verify --quiet --short "$OLD^{commit}") || die "'$OLD' names no commit"
[ -f "$F/train-images-idx3-ubyte.gz" ] || die "$F: Fashion-MNIST missing (apt install dataset-fashion-mnist)"
if [ -n "${JPEG_SHARDS:-}" ] && [ ! -f "$JPEG_SHARDS/manifest.json" ]; then
  die "JPEG_SHARDS=$JPEG_SHARDS: no manifest.json there (not a shardkit dataset)"
fi
source scripts/deps.sh
new_sha=$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo "+changes")
OLD_DIR=out/commits/$old_sha
mkdir -p "$OUT" out/commits

if [ ! -x "$OLD_DIR/build/train/shardkit-train" ]; then
  echo "== building $old_sha in $OLD_DIR" >&2
  [ -d "$OLD_DIR" ] || git worktree add --detach "$OLD_DIR" "$old_sha" > /dev/null
  # Built as this tree's build/ is (assertions on or off: both sides alike).
  assertions=$(sed -n 's/^SHARDKIT_ASSERTIONS:BOOL=//p' build/CMakeCache.txt 2>/dev/null)
  (cd "$OLD_DIR" && shardkit_build build -DSHARDKIT_BUILD_TESTS=OFF -DSHARDKIT_WITH_PYTHON=OFF \
    ${assertions:+-DSHARDKIT_ASSERTIONS=$assertions} > /dev/null)
fi
[ -x build/train/shardkit-train ] || shardkit_build build > /dev/null
# Each side's loader_dump (a test tool: built alone, where OLD has one).
if [ ! -x "$OLD_DIR/build/tests/loader_dump" ] && [ -f "$OLD_DIR/tests/tools/loader_dump.cc" ]; then
  (cd "$OLD_DIR" && cmake -S . -B build -DSHARDKIT_BUILD_TESTS=ON > /dev/null &&
    cmake --build build -j"$(nproc)" --target loader_dump > /dev/null) || true
fi
[ -x build/tests/loader_dump ] || cmake --build build -j"$(nproc)" --target loader_dump > /dev/null

echo "== data" >&2
# Each side reads data its own build packed (a newer shard format is refused
# by an older reader), from the same sources.
JPEG_GIVEN=${JPEG_SHARDS:-}
if [ -z "$JPEG_GIVEN" ]; then
  shardkit_install_deps mate-backgrounds python3-skimage
  [ -d "$OUT/jpeg-tree" ] || $PY scripts/make_jpeg_set.py "$OUT/jpeg-tree" --per-class 50
fi
for side in old new; do
  dir=.
  [ "$side" = old ] && dir=$OLD_DIR
  $dir/build/tools/pack/shardkit-pack idx --force --images $F/train-images-idx3-ubyte.gz \
    --labels $F/train-labels-idx1-ubyte.gz "$OUT/fashion-$side" > /dev/null
  if [ -z "$JPEG_GIVEN" ]; then
    $dir/build/tools/pack/shardkit-pack imagenet "$OUT/jpeg-tree" "$OUT/jpeg-shards-$side" --force > /dev/null
  fi
done
sync

echo "== the packed datasets, byte for byte, old against new" >&2
# Every shard file the same bytes, and the manifests the same but for when
# and by what they were made (created_at, created_by).
same=0 differ=()
datasets=fashion
[ -n "$JPEG_GIVEN" ] || datasets="fashion jpeg-shards"  # a given JPEG set is not packed here
for d in $datasets; do
  for f in "$OUT/$d-old"/*; do
    name=${f##*/}
    if [ "$name" = manifest.json ]; then
      $PY - "$f" "$OUT/$d-new/$name" << 'PYEOF' && ok=1 || ok=0
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for m in (a, b):
    m.pop("created_at", None), m.pop("created_by", None)
sys.exit(a != b)
PYEOF
    else
      cmp -s "$f" "$OUT/$d-new/$name" && ok=1 || ok=0
    fi
    if [ $ok = 1 ]; then same=$((same + 1)); else differ+=("$d/$name"); fi
  done
  [ "$(ls "$OUT/$d-old" | wc -l)" = "$(ls "$OUT/$d-new" | wc -l)" ] || differ+=("$d: another number of files")
done
echo "dataset files byte-identical: $same of $((same + ${#differ[@]}))${differ[*]:+; differ: ${differ[*]}}" |
  tee "$OUT/datasets.txt"

echo "== the loader's batches, byte for byte, old against new" >&2
if [ -x "$OLD_DIR/build/tests/loader_dump" ]; then
  same=0 differ=()
  for cfg in "jpeg train" "jpeg val" "fashion none"; do
    set -- $cfg
    for w in 1 2; do
      for e in 0 1; do
        for side in old new; do
          dir=.
          [ "$side" = old ] && dir=$OLD_DIR
          data=$OUT/fashion-$side
          [ "$1" = jpeg ] && data=${JPEG_GIVEN:-$OUT/jpeg-shards-$side}
          "$dir/build/tests/loader_dump" "$data" "$OUT/dump-$side" --transform "$2" --size 224 \
            --workers "$w" --epoch "$e" --shuffle full --batch 32
        done
        if cmp -s "$OUT/dump-old" "$OUT/dump-new"; then same=$((same + 1)); else differ+=("$cfg w$w e$e"); fi
      done
    done
  done
  rm -f "$OUT/dump-old" "$OUT/dump-new"
  echo "epochs byte-identical: $same of $((same + ${#differ[@]}))${differ[*]:+; differ: ${differ[*]}}" | tee "$OUT/epochs.txt"
else
  echo "epochs: $old_sha has no tests/tools/loader_dump: not compared" | tee "$OUT/epochs.txt"
fi

cores=$(nproc)
# One round of every benchmark on SIDE (old|new): appends "NAME SIDE img/s" lines to $OUT/runs.txt.
measure() {
  local side=$1 dir=.
  [ "$side" = old ] && dir=$OLD_DIR
  local bench=$dir/build/tools/bench/shardkit-bench train=$dir/build/train/shardkit-train
  local j fashion=$OUT/fashion-$side jpeg=${JPEG_GIVEN:-$OUT/jpeg-shards-$side}
  j=$("$bench" loader "$jpeg" --workers 1,2 --batch 32 --batches "$BATCHES" --transform train --json 2> /dev/null)
  echo "$j" | $PY -c 'import json,sys; [print("jpeg-train-224-w%d" % r["workers"], sys.argv[1], r["images_per_sec"]) for r in json.load(sys.stdin)]' "$side" >> "$OUT/runs.txt"
  j=$("$bench" loader "$fashion" --workers 1,2 --batch 256 --batches "$RAW_BATCHES" --transform none --shuffle block --cache-mb 8 --json 2> /dev/null)
  echo "$j" | $PY -c 'import json,sys; [print("raw-streamed-w%d" % r["workers"], sys.argv[1], r["images_per_sec"]) for r in json.load(sys.stdin)]' "$side" >> "$OUT/runs.txt"
  j=$("$bench" loader "$fashion" --workers 1,2 --batch 256 --batches "$RAW_BATCHES" --transform none --shuffle full --json 2> /dev/null)
  echo "$j" | $PY -c 'import json,sys; [print("raw-cached-w%d" % r["workers"], sys.argv[1], r["images_per_sec"]) for r in json.load(sys.stdin)]' "$side" >> "$OUT/runs.txt"
  for np in 1 2; do
    local extra="" m="$OUT/m-$side-$np.jsonl"
    [ $np -gt 1 ] && extra="--nproc-per-node $np"
    rm -f "$m"
    "$train" --data "$fashion" --arch resnet20 --batch-size 64 --workers 1 --threads $((cores / np)) \
      --max-steps "$STEPS" --lr 0.2 --quiet --metrics "$m" $extra > /dev/null 2>&1
    echo "train-resnet20-${np}rank $side $(tail -1 "$m" | $PY -c 'import json,sys; print(json.load(sys.stdin)["images_per_sec"])')" >> "$OUT/runs.txt"
  done
}

: > "$OUT/runs.txt"
for r in $(seq 1 "$ROUNDS"); do
  # Alternate which side goes first.
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for side in $order; do
    echo "== round $r/$ROUNDS: $side" >&2
    measure "$side"
  done
done

$PY - "$OUT/runs.txt" "$old_sha" "$new_sha" <<'PY' | tee "$OUT/results.md"
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    name, side, v = line.split()
    runs[name][side].append(float(v))
print("Median and best of %d alternating rounds, img/s (old = %s, new = %s):\n" % (
    max(len(s["old"]) for s in runs.values()), sys.argv[2], sys.argv[3]))
print("| benchmark | old median | new median | new / old (median) | new / old (best) | old rounds | new rounds |")
print("|---|---:|---:|---:|---:|---|---|")
fmt = lambda xs: ", ".join("%.0f" % x for x in xs)
for name, s in runs.items():
    om, nm = statistics.median(s["old"]), statistics.median(s["new"])
    print("| %s | %.0f | %.0f | %.2f | %.2f | %s | %s |" % (
        name, om, nm, nm / om, max(s["new"]) / max(s["old"]), fmt(s["old"]), fmt(s["new"])))
PY
{ echo; cat "$OUT/epochs.txt"; } | tee -a "$OUT/results.md"
