#!/usr/bin/env bash
# shardkit-train against PyTorch DistributedDataParallel (Debian's python3-torch,
# Gloo), same model (ResNet-20), data (Fashion-MNIST), steps, batch and threads
# per rank, 1 and 2 ranks, in one run. Prints a markdown table.
# usage: bench/train_compare.sh [OUT]   (env: STEPS=200 BATCH=64)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/train-bench}
STEPS=${STEPS:-200}
BATCH=${BATCH:-64}
F=/usr/share/datasets/fashion-mnist
mkdir -p "$OUT"
build/tools/pack/shardkit-pack idx --force --images $F/train-images-idx3-ubyte.gz \
  --labels $F/train-labels-idx1-ubyte.gz "$OUT/fashion" > /dev/null
cores=$(nproc)
# shardkit-train runs with its defaults (channels-last memory format); the
# peer as a DDP script is usually written (NCHW), and once more with
# channels-last by hand, so the table shows what the layout alone is worth.
echo "| ranks | threads/rank | shardkit-train img/s | PyTorch DDP img/s | ratio | PyTorch DDP + channels_last img/s | ratio | shardkit data-wait | PyTorch data-wait | shardkit exposed comm |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for np in 1 2; do
  th=$((cores / np))
  peer() {
    /usr/bin/python3 bench/pytorch_ddp.py $F/train-images-idx3-ubyte.gz $F/train-labels-idx1-ubyte.gz \
      --nproc $np --threads $th --batch-size $BATCH --steps $STEPS --workers 1 "$@" 2>/dev/null | tail -1
  }
  py=$(peer)
  pycl=$(peer --channels-last)
  rm -f "$OUT/m$np.jsonl"
  extra=""; [ $np -gt 1 ] && extra="--nproc-per-node $np"
  build/train/shardkit-train --data "$OUT/fashion" --arch resnet20 --batch-size $BATCH --workers 1 --threads $th \
    --max-steps $STEPS --lr 0.2 --weight-decay 5e-4 --quiet --metrics "$OUT/m$np.jsonl" $extra > /dev/null 2>&1
  /usr/bin/python3 - "$py" "$pycl" "$OUT/m$np.jsonl" $np $th <<'PY'
import json, sys
py, pycl = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sk = json.loads(open(sys.argv[3]).read().splitlines()[-1])
r = sk["images_per_sec"]
print("| %s | %s | %.0f | %.0f | %.2fx | %.0f | %.2fx | %.1f%% | %.1f%% | %.1f%% |" % (
    sys.argv[4], sys.argv[5], r, py["images_per_sec"], r / py["images_per_sec"], pycl["images_per_sec"],
    r / pycl["images_per_sec"], 100 * sk["data_wait_fraction"], 100 * py["data_wait_fraction"],
    100 * sk["comm_exposed_fraction"]))
PY
done
