#!/usr/bin/env bash
# Cold and storage-bound, side by side in one run: shardkit's loader against
# PyTorch's DataLoader + ImageFolder over the same real-photo JPEGs, both
# reading from storage (every file or shard evicted from the page cache before
# each round), unthrottled and with the read bandwidth of this benchmark's
# processes capped by a cgroup's blkio throttle, as a node's share of a
# GPFS/Lustre/EBS volume is. Bytes read come from the cgroup's own counter, the
# same for both sides. Writes $OUT/cold.md (table), cold.csv and cold.svg.
#
# Each figure is the best of REPEAT rounds on both sides (a cold round starts
# from evicted files and fresh workers); MB read is per round.
#
# usage: bench/cold_compare.sh [OUT]  (env: WORKERS=1,2 BW_MB=200,50 PER_CLASS=150 BATCHES=40 REPEAT=3)
# Needs root and cgroup v1 blkio for the throttled rows (skipped with a message otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/cold}
WORKERS=${WORKERS:-1,2}
BW_MB=${BW_MB:-200,50}
PER_CLASS=${PER_CLASS:-150}
BATCHES=${BATCHES:-40}
REPEAT=${REPEAT:-3}
BATCH=32
PY=/usr/bin/python3
PACK=build/tools/pack/shardkit-pack
BENCH=build/tools/bench/shardkit-bench
source scripts/deps.sh
shardkit_install_deps mate-backgrounds python3-skimage
[ -x "$BENCH" ] || shardkit_build build
mkdir -p "$OUT"

if [ ! -d "$OUT/tree" ]; then $PY scripts/make_jpeg_set.py "$OUT/tree" --per-class "$PER_CLASS"; fi
$PACK imagenet "$OUT/tree" "$OUT/ds" --force --shard-size 32000000 > /dev/null
sync
records=$($PACK inspect --json "$OUT/ds" 2>/dev/null | $PY -c 'import json,sys; j=json.load(sys.stdin); print(j["records"])')
bytes=$($PACK inspect --json "$OUT/ds" 2>/dev/null | $PY -c 'import json,sys; j=json.load(sys.stdin); print(j["raw_bytes"])')
mean=$((bytes / records))
echo "== $records real-photo JPEGs, mean $mean bytes; batch $BATCH, $BATCHES batches a round, train transform"

# The cgroup whose read bandwidth is capped, on the device that holds $OUT.
CG=/sys/fs/cgroup/blkio/shardkit-cold-$$
DEV=$(findmnt -no MAJ:MIN -T "$OUT" | head -n 1 | tr -d ' ')
throttle=1
if [ "$(id -u)" -ne 0 ] || [ ! -d /sys/fs/cgroup/blkio ] || ! mkdir "$CG" 2>/dev/null; then
  echo "cold_compare: no cgroup v1 blkio here (needs root): throttled rows skipped, unthrottled cold rows only"
  throttle=0
fi
cleanup() { [ "$throttle" -eq 1 ] && rmdir "$CG" 2>/dev/null || true; }
trap cleanup EXIT
read_bytes() {  # bytes this benchmark's cgroup has read from $DEV
  if [ "$throttle" -eq 1 ]; then
    awk -v d="$DEV" '$1 == d && $2 == "Read" {print $3; f=1} END {if (!f) print 0}' "$CG/blkio.throttle.io_service_bytes"
  else
    echo 0
  fi
}
run_in_cgroup() {  # command... : runs it inside the cgroup (or plainly without one)
  if [ "$throttle" -eq 1 ]; then
    bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG" "$@"
  else
    "$@"
  fi
}

echo "bandwidth,workers,shardkit_images_per_sec,shardkit_mb_read,pytorch_images_per_sec,pytorch_mb_read,bound_images_per_sec" > "$OUT/cold.csv"
settings="warm unthrottled"
[ "$throttle" -eq 1 ] && settings="$settings ${BW_MB//,/ }"
for bw in $settings; do
  if [ "$throttle" -eq 1 ]; then
    if [ "$bw" = warm ] || [ "$bw" = unthrottled ]; then limit=0; else limit=$((bw * 1000000)); fi
    echo "$DEV $limit" > "$CG/blkio.throttle.read_bps_device"
  fi
  cold=--cold
  [ "$bw" = warm ] && cold=
  for w in ${WORKERS//,/ }; do
    b0=$(read_bytes)
    sk=$(run_in_cgroup $BENCH loader "$OUT/ds" --workers "$w" --batch $BATCH --batches "$BATCHES" --repeat "$REPEAT" \
         --transform train $cold --json 2>/dev/null)
    b1=$(read_bytes)
    pt=$(run_in_cgroup $PY bench/pytorch_loader.py imagefolder "$OUT/tree" --workers "$w" --batch $BATCH \
         --batches "$BATCHES" --repeat "$REPEAT" --warmup 5 $cold)
    b2=$(read_bytes)
    sk_ips=$(echo "$sk" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["images_per_sec"])')
    pt_ips=$(echo "$pt" | $PY -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["images_per_sec"])')
    bound=0
    case "$bw" in warm|unthrottled) ;; *) bound=$((bw * 1000000 / mean)) ;; esac
    echo "$bw,$w,$sk_ips,$(( (b1 - b0) / REPEAT / 1000000 )),$pt_ips,$(( (b2 - b1) / REPEAT / 1000000 )),$bound" >> "$OUT/cold.csv"
    tail -n 1 "$OUT/cold.csv"
  done
done
$PY - "$OUT" "$records" "$mean" "$BATCHES" "$BATCH" "$REPEAT" <<'EOF'
import csv, sys
out, records, mean, batches, batch, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rows = list(csv.DictReader(open(out + "/cold.csv")))
images = batches * batch
lines = ["| storage | workers | shardkit img/s | MB read | PyTorch DataLoader img/s | MB read | shardkit / PyTorch | storage bound img/s | shardkit / bound |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    sk, pt, bound = float(r["shardkit_images_per_sec"]), float(r["pytorch_images_per_sec"]), int(r["bound_images_per_sec"])
    name = {"warm": "warm page cache", "unthrottled": "cold, unthrottled"}.get(r["bandwidth"], "cold, %s MB/s" % r["bandwidth"])
    mb = lambda v: "-" if r["bandwidth"] == "warm" or v == "0" else v
    lines.append("| %s | %s | %.0f | %s | %.0f | %s | %.2fx | %s | %s |" % (
        name, r["workers"], sk, mb(r["shardkit_mb_read"]), pt, mb(r["pytorch_mb_read"]), sk / pt,
        bound or "-", ("%.2f" % (sk / bound)) if bound else "-"))
note = ("%d real-photo JPEGs (mean %d bytes), %d images a round (batch %d), train transform, best of %d rounds "
        "on both sides; MB read: the cgroup's blkio counter over each side's whole run, per round; "
        "storage bound: bandwidth / mean record size." % (records, mean, images, batch, repeat))
open(out + "/cold.md", "w").write("\n".join(lines) + "\n\n" + note + "\n")
print("\n".join(lines)); print(); print(note)
EOF
