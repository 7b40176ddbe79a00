#!/usr/bin/env bash
# The main job on a dataset a Debian package ships (Fashion-MNIST): install,
# build, pack the IDX files into shards, verify them and inspect the result.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
shardkit_install_deps
shardkit_build build

SRC=/usr/share/datasets/fashion-mnist
OUT=${OUT:-out/demo}
PACK=build/tools/pack/shardkit-pack
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
