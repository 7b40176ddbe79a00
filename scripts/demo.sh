#!/usr/bin/env bash
# The main job on a dataset a Debian package ships (Fashion-MNIST): install
# what is missing, build, pack the IDX files into shards, verify and inspect
# them, benchmark the loader, then train a ResNet-20 with 2 DDP ranks on this
# machine for 3 epochs (about 92% test accuracy), printing per-epoch metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
shardkit_install_deps
# What the demo runs, nothing more (the test suite is scripts/test.sh's).
shardkit_build_main shardkit-pack shardkit-bench shardkit-train

SRC=/usr/share/datasets/fashion-mnist
OUT=${OUT:-out/demo}
EPOCHS=${EPOCHS:-3}
PACK=build/tools/pack/shardkit-pack
BENCH=build/tools/bench/shardkit-bench
TRAIN=build/train/shardkit-train
CLASSES="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
mkdir -p "$OUT"

echo "== pack Fashion-MNIST (train and test) into shards"
$PACK idx --force --images $SRC/train-images-idx3-ubyte.gz --labels $SRC/train-labels-idx1-ubyte.gz \
  --class-names "$CLASSES" "$OUT/fashion-train"
$PACK idx --force --images $SRC/t10k-images-idx3-ubyte.gz --labels $SRC/t10k-labels-idx1-ubyte.gz \
  --class-names "$CLASSES" "$OUT/fashion-test"

echo "== verify every record checksum"
$PACK verify "$OUT/fashion-train"
$PACK verify "$OUT/fashion-test"

echo "== inspect"
$PACK inspect "$OUT/fashion-train"

echo "== loader throughput per worker count (table, CSV, SVG plot)"
# A batch of 256 raw records takes tens of microseconds: rounds of 5000
# batches (a quarter of a second or more) time the loader, not the
# scheduler's slices; the bench warms up until the loader has settled how it
# fills batches (alone or with its workers) before it times anything.
$BENCH loader "$OUT/fashion-train" --workers 1,2 --batch 256 --batches 5000 --transform none \
  --csv "$OUT/bench.csv" --plot "$OUT/bench.svg"

echo "== train ResNet-20, 2 DDP ranks (Gloo), $EPOCHS epochs"
rm -f "$OUT/metrics.jsonl"
$TRAIN --nproc-per-node 2 --data "$OUT/fashion-train" --val "$OUT/fashion-test" --arch resnet20 \
  --epochs "$EPOCHS" --batch-size 64 --workers 1 --lr 0.2 --weight-decay 5e-4 --warmup-epochs 0.2 \
  --checkpoint-dir "$OUT/checkpoints" --metrics "$OUT/metrics.jsonl" --export "$OUT/resnet20.pt" --print-every 50
echo "== done: per-epoch metrics in $OUT/metrics.jsonl, weights in $OUT/resnet20.pt (torch.load reads them)"
