#!/usr/bin/env bash
# examples/train_imagenet.py with --loader shardkit and --loader pytorch, side by
# side in one run: torchvision ResNet under DDP (gloo, CPU here), the same JPEGs
# as shards and as an ImageFolder. Prints each run's summary (images/s, the
# fraction of the loop spent waiting for data) and the ratio; writes OUT/train.md.
#
# usage: bench/example_train_compare.sh TREE SHARDS [OUT]
#   env: RANKS=2 ARCH=resnet18 SIZE=112 BATCH=32 STEPS=40 WORKERS=1 ROUNDS=2
set -euo pipefail
cd "$(dirname "$0")/.."
TREE=$1 SHARDS=$2 OUT=${3:-out/example_train}
RANKS=${RANKS:-2} ARCH=${ARCH:-resnet18} SIZE=${SIZE:-112} BATCH=${BATCH:-32} STEPS=${STEPS:-40}
WORKERS=${WORKERS:-1} ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
: > "$OUT/runs.jsonl"
for round in $(seq "$ROUNDS"); do
  for loader in shardkit pytorch; do
    data=$SHARDS; [ "$loader" = pytorch ] && data=$TREE
    # The ranks are started as torchrun would (Debian's torch.distributed.run
    # fails in its log redirection), with the same environment variables.
    port=$((29500 + RANDOM % 1000)) pids=()
    for rank in $(seq 0 $((RANKS - 1))); do
      PYTHONPATH=build/python OMP_NUM_THREADS=1 RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$RANKS \
        LOCAL_WORLD_SIZE=$RANKS MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        /usr/bin/python3 examples/train_imagenet.py --loader "$loader" --data "$data" --arch "$ARCH" \
        --image-size "$SIZE" --batch-size "$BATCH" --workers "$WORKERS" --max-steps "$STEPS" --epochs 100 \
        --print-every 1000 --json "$OUT/$loader.json" > "$OUT/$loader.$rank.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { cat "$OUT/$loader".*.log; exit 2; }; done
    cat "$OUT/$loader.json" | tee -a "$OUT/runs.jsonl"
  done
done
/usr/bin/python3 - "$OUT" "$*" <<'PY'
import json, sys
out, argv = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(out + "/runs.jsonl")]
best = {}
for r in runs:
    if r["loader"] not in best or r["images_per_s"] > best[r["loader"]]["images_per_s"]:
        best[r["loader"]] = r
s, p = best["shardkit"], best["pytorch"]
md = ("examples/train_imagenet.py, %s, %d gloo ranks (CPU), best of %d rounds: `bench/example_train_compare.sh %s`\n\n"
      "| loader | images/s | data-wait | mean loss |\n|---|---|---|---|\n" % (s["arch"], s["ranks"], len(runs) // 2, argv))
for r in (s, p):
    md += "| %s | %.0f | %.1f%% | %.3f |\n" % (r["loader"], r["images_per_s"], 100 * r["data_wait_fraction"], r["mean_loss"])
md += "\nshardkit / pytorch: **%.2fx** images/s\n" % (s["images_per_s"] / p["images_per_s"])
open(out + "/train.md", "w").write(md)
print(md)
PY
