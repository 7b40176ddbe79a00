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
echo "| ranks | threads/rank | shardkit-train img/s | PyTorch DDP img/s | ratio | shardkit data-wait | PyTorch data-wait | shardkit exposed comm |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for np in 1 2; do
  th=$((cores / np))
  py=$(/usr/bin/python3 bench/pytorch_ddp.py $F/train-images-idx3-ubyte.gz $F/train-labels-idx1-ubyte.gz \
       --nproc $np --threads $th --batch-size $BATCH --steps $STEPS --workers 1 2>/dev/null | tail -1)
  rm -f "$OUT/m$np.jsonl"
  extra=""; [ $np -gt 1 ] && extra="--nproc-per-node $np"
  build/train/shardkit-train --data "$OUT/fashion" --arch resnet20 --batch-size $BATCH --workers 1 --threads $th \
    --max-steps $STEPS --lr 0.2 --weight-decay 5e-4 --quiet --metrics "$OUT/m$np.jsonl" $extra > /dev/null 2>&1
  /usr/bin/python3 - "$py" "$OUT/m$np.jsonl" $np $th <<'PY'
import json, sys
py = json.loads(sys.argv[1]); sk = json.loads(open(sys.argv[2]).read().splitlines()[-1])
print("| %s | %s | %.0f | %.0f | %.2fx | %.1f%% | %.1f%% | %.1f%% |" % (sys.argv[3], sys.argv[4], sk["images_per_sec"],
      py["images_per_sec"], sk["images_per_sec"] / py["images_per_sec"], 100 * sk["data_wait_fraction"],
      100 * py["data_wait_fraction"], 100 * sk["comm_exposed_fraction"]))
PY
done
