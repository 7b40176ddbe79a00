#!/usr/bin/env bash
# The bigMNIST study's dataset end to end (issue 34): made in parts (one after
# another here, or as a SLURM array with --slurm), merged, verified, then read
# by 2 ranks at once for one epoch at batch 512: time to make, bytes on disk,
# open time, first batch, memory per rank and samples/s, beside the study's
# 13,700 samples/s data path.
#
#   bench/bigmnist_full.sh OUT [--copies N] [--parts P] [--identical] [--slurm]
#                              [--workers W] [--src IDX_DIR] [--keep]
#
# --copies 200 (the default) is the study's 72,000,000 records (60,000 x 6
# versions x 200 copies), every copy its own augmentation (--distinct-copies,
# recipe rcc): about 11 core-hours of elastic deformation, work for an array
# (--slurm submits slurm/prepare.sh; a cluster must be there). --identical
# makes copies that repeat their version (minutes, not hours: the same size on
# disk and the same open/read costs, not the study's samples). Parts already
# made in OUT/parts are kept (re-running continues an interrupted make).
# OUT/results.txt gets the summary; --keep keeps the dataset (35.6 GB at 72M).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SHARDKIT_BIN:-$ROOT/build}
OUT=${1:?usage: bench/bigmnist_full.sh OUT [--copies N] [--parts P] [--identical] [--slurm]}
shift
COPIES=200 PARTS=8 DISTINCT=--distinct-copies SLURM=0 WORKERS=1 KEEP=0
SRC=/usr/share/datasets/fashion-mnist
while [ $# -gt 0 ]; do
  case "$1" in
    --copies) COPIES=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --identical) DISTINCT=""; shift ;;
    --slurm) SLURM=1; shift ;;
    --workers) WORKERS=$2; shift 2 ;;
    --src) SRC=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "bigmnist_full: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AUGMENT=$BIN/tools/augment/shardkit-augment PACK=$BIN/tools/pack/shardkit-pack
mkdir -p "$OUT/parts"
DS=$OUT/bigmnist
RESULTS=$OUT/results.txt
: > "$RESULTS"
say() { echo "$*" | tee -a "$RESULTS"; }
cmd=("$AUGMENT" bigmnist --src "$SRC" --versions 6 --copies "$COPIES" --recipe rcc $DISTINCT)
say "bigmnist_full: ${cmd[*]}, $PARTS parts, $(nproc) cores"

# 1. Make: the parts, then merge them into one dataset.
t0=$SECONDS
if [ "$SLURM" = 1 ]; then
  "$ROOT/slurm/prepare.sh" --parts "$PARTS" --parts-dir "$OUT/parts" --out "$DS" --wait -- \
    "${cmd[@]/#$AUGMENT/shardkit-augment}"
else
  for i in $(seq 0 $((PARTS - 1))); do
    if [ -f "$OUT/parts/part-$i/part.json" ]; then echo "part $i/$PARTS: kept"; continue; fi
    "${cmd[@]}" --part "$i/$PARTS" --force "$OUT/parts/part-$i"
  done
  rm -rf "$DS"
  parts=()
  for i in $(seq 0 $((PARTS - 1))); do parts+=("$OUT/parts/part-$i"); done
  "$PACK" merge "$DS" "${parts[@]}"
fi
make_s=$((SECONDS - t0))
say "made: $make_s s ($(awk -v s="$make_s" -v c="$(nproc)" 'BEGIN { printf "%.2f core-hours", s * c / 3600 }'))"
say "on disk: $(du -sb "$DS" | cut -f1) bytes ($(du -sh "$DS" | cut -f1)); $("$PACK" inspect "$DS" | grep -E '^(records|shards)' | tr -s ' ' | paste -sd';')"

# 2. Verify every checksum.
t0=$SECONDS
"$PACK" verify "$DS" | tail -n1 | tee -a "$RESULTS"
say "verify: $((SECONDS - t0)) s"

# 3. Two ranks at once: open, first batch, one epoch of reads at batch 512.
PROBE=$OUT/open_probe
# shellcheck disable=SC2046
g++ -std=c++17 -O2 -fopenmp -I"$ROOT" -I"$BIN" "$ROOT/bench/open_probe.cc" -Wl,--start-group \
  $(for l in loader/libshardkit_loader image/libshardkit_image shard/libshardkit_shard storage/libshardkit_storage \
      storage/remote/libshardkit_storage_remote storage/libshardkit_storage_local base/libshardkit_base; do
      echo "$BIN/$l.a"; done) -Wl,--end-group \
  -lzstd -lturbojpeg -ljpeg -lpng -lcurl -lcrypto -lpthread -o "$PROBE"
pids=()
for r in 0 1; do
  flag=""; [ $r = 0 ] && flag=--cold
  "$PROBE" "$DS" --rank $r --world 2 --shuffle auto --batch 512 --workers "$WORKERS" --epoch $flag \
    < /dev/null > "$OUT/rank$r.txt" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for r in 0 1; do say "rank $r of 2: $(paste -sd' ' "$OUT/rank$r.txt")"; done
total=$(awk -F'samples_per_s=' '/samples_per_s=/ { split($2, a, " "); s += a[1] } END { print s }' "$OUT"/rank*.txt)
say "2 ranks together: $total samples/s; the study's data path: 13700 samples/s ($(awk -v t="$total" 'BEGIN { printf "%.1fx", t / 13700 }'))"
[ "$KEEP" = 1 ] || rm -rf "$DS" "$OUT/parts"
