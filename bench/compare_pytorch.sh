#!/usr/bin/env bash
# Side by side, in one run on this machine: shardkit against PyTorch's
# DataLoader (Debian's python3-torch / python3-torchvision), per worker count,
# plus the physical references (full-size libjpeg-turbo decode and zstd alone,
# one core, from memory) and shardkit-pack against plain `cat` of the same tree.
# Writes $OUT/results.md (the table for docs/performance.md), CSVs and SVG plots.
#
# usage: bench/compare_pytorch.sh [OUT]   (env: WORKERS=1,2 PER_CLASS=100 BATCHES=60)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/bench}
WORKERS=${WORKERS:-1,2}
PER_CLASS=${PER_CLASS:-100}
BATCHES=${BATCHES:-60}
PY=/usr/bin/python3
PACK=build/tools/pack/shardkit-pack
BENCH=build/tools/bench/shardkit-bench
FASHION=/usr/share/datasets/fashion-mnist
source scripts/deps.sh
shardkit_install_deps mate-backgrounds python3-skimage
[ -x "$BENCH" ] || shardkit_build build
mkdir -p "$OUT"

echo "== ImageNet-shaped JPEG tree from real photographs"
if [ ! -d "$OUT/jpeg-tree" ]; then
  $PY scripts/make_jpeg_set.py "$OUT/jpeg-tree" --per-class "$PER_CLASS"
fi

echo "== pack throughput beside cat (warm page cache for both)"
find "$OUT/jpeg-tree" -type f -exec cat {} + > /dev/null
t0=$(date +%s.%N); find "$OUT/jpeg-tree" -type f -exec cat {} + > /dev/null; t1=$(date +%s.%N)
$PACK imagenet "$OUT/jpeg-tree" "$OUT/jpeg-shards" --force --shard-size 32000000 > "$OUT/pack.txt"
t2=$(date +%s.%N)
files=$(find "$OUT/jpeg-tree" -type f | wc -l)
bytes=$(du -sb "$OUT/jpeg-tree" | cut -f1)
cat "$OUT/pack.txt"

echo "== JPEG: references, shardkit loader, PyTorch DataLoader (train transform, 224)"
$BENCH reference "$OUT/jpeg-shards" --json > "$OUT/jpeg-reference.json"
$BENCH loader "$OUT/jpeg-shards" --workers "$WORKERS" --batch 32 --batches "$BATCHES" --transform train \
  --csv "$OUT/jpeg-shardkit.csv" --plot "$OUT/jpeg-shardkit.svg" --json \
  --title "shardkit loader, JPEG train transform (224), batch 32" > "$OUT/jpeg-shardkit.json"
$PY bench/pytorch_loader.py imagefolder "$OUT/jpeg-tree" --workers "$WORKERS" --batch 32 \
  --batches "$((BATCHES / 2))" --warmup 5 > "$OUT/jpeg-pytorch.jsonl"

echo "== Fashion-MNIST raw 28x28: references, shardkit loader, PyTorch TensorDataset DataLoader"
$PACK idx --force --images $FASHION/train-images-idx3-ubyte.gz --labels $FASHION/train-labels-idx1-ubyte.gz \
  "$OUT/fashion-shards" > /dev/null
sync; sleep 2  # let writeback of the fresh shards finish before timing
$BENCH reference "$OUT/fashion-shards" --json > "$OUT/raw-reference.json"
# Streaming: a block cache far smaller than the data, so every block is read
# and decompressed once per epoch (what a dataset larger than memory sees).
$BENCH loader "$OUT/fashion-shards" --workers "$WORKERS" --batch 256 --batches 1000 --transform none \
  --shuffle block --cache-mb 8 --csv "$OUT/raw-shardkit.csv" --plot "$OUT/raw-shardkit.svg" --json \
  --title "shardkit loader, Fashion-MNIST shards streamed (block-local), batch 256" > "$OUT/raw-shardkit.json"
# Cached: the whole (decompressed) dataset stays in the block cache, full shuffle.
$BENCH loader "$OUT/fashion-shards" --workers "$WORKERS" --batch 256 --batches 1000 --transform none \
  --shuffle full --json > "$OUT/raw-shardkit-cached.json"
$PY bench/pytorch_loader.py tensor $FASHION/train-images-idx3-ubyte.gz $FASHION/train-labels-idx1-ubyte.gz \
  --workers "$WORKERS" --batch 256 --batches 200 --warmup 10 > "$OUT/raw-pytorch.jsonl"

$PY bench/summarize.py "$OUT" "$files" "$bytes" "$t0" "$t1" "$t2" | tee "$OUT/results.md"
