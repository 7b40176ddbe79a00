#!/usr/bin/env bash
# What a resolution schedule saves the loader, per core: for each output size
# (default 128 160 192 224) and each transform (train: RandomResizedCrop +
# flip; val: Resize(round(size / 0.875)) + CenterCrop), build/bench/decode_floor
# times the loader with one worker against its decode floor (each crop decoded
# at the DCT scale the loader picks for that size, nothing else), alternating
# the two in every round, on the ImageNet-shaped set of bench/decode_floor.sh.
# Prints one markdown table: img/s by the wall clock and per CPU second of the
# process, best of ROUNDS rounds, and the loader's share of the floor.
#
# usage: bench/resolution_sizes.sh [OUT]   (env: SIZES="128 160 192 224" ROUNDS=5 PER_CLASS=150)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/resolution-sizes}
SIZES=${SIZES:-128 160 192 224}
ROUNDS=${ROUNDS:-5}
PER_CLASS=${PER_CLASS:-150}
PROBE=build/bench/decode_floor
PACK=build/tools/pack/shardkit-pack
PY=/usr/bin/python3
source scripts/deps.sh
shardkit_install_deps mate-backgrounds python3-skimage
[ -x "$PROBE" ] && [ -x "$PACK" ] || shardkit_build build
mkdir -p "$OUT"

source bench/jpeg_set.sh
bench_jpeg_shards "$OUT/jpeg-tree" "$OUT/jpeg-shards" "$PER_CLASS"
echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for t in train val; do
  for s in $SIZES; do
    echo "== $t at $s px"
    $PROBE "$OUT/jpeg-shards" --transform "$t" --size "$s" --rounds "$ROUNDS" --only floor \
      > /dev/null  # warm the page cache and the CPU's clocks alike for every size
    $PROBE "$OUT/jpeg-shards" --transform "$t" --size "$s" --rounds "$ROUNDS" | tee "$OUT/$t-$s.txt"
  done
done

# The table: "side best-img/s median-img/s best-img/cpu-s us/img" rows of each run.
$PY - "$OUT" $SIZES << 'EOF'
import sys
out, sizes = sys.argv[1], sys.argv[2:]
def row(path, side):
    for line in open(path):
        f = line.split()
        if len(f) == 5 and f[0] == side:
            return float(f[1]), float(f[3])
    raise SystemExit(f"{path}: no '{side}' row (did decode_floor fail?)")
print("\n| transform | size | loader img/s (per CPU-s) | decode floor img/s (per CPU-s) | loader / floor | loader vs 224 px |")
print("|---|---:|---:|---:|---:|---:|")
for t in ("train", "val"):
    base = row(f"{out}/{t}-224.txt", "loader")[0] if "224" in sizes else None
    for s in sizes:
        (lw, lc), (fw, fc) = row(f"{out}/{t}-{s}.txt", "loader"), row(f"{out}/{t}-{s}.txt", "floor")
        rel = f"{lw / base:.2f}x" if base else "-"
        print(f"| {t} | {s} | {lw:.0f} ({lc:.0f}) | {fw:.0f} ({fc:.0f}) | {lw / fw:.2f} | {rel} |")
EOF
