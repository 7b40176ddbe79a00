#!/usr/bin/env bash
# How each cost grows with the dataset, at ImageNet's shape: 1000 class folders
# of 1281 files, made of small JPEGs cut from real photographs and hard-linked
# (so the tree costs a few MB of disk), measured at 10k, 128k and 1.28M records:
# pack (wall, files/s, peak RSS), verify, inspect, loader open time, peak RSS
# of one rank (batch 256, 224 px, default options), cold and warm images/s, and
# slurm/stage.sh. Writes $OUT/scale.md (table), scale.csv and scale.svg.
#
# usage: bench/imagenet_scale.sh [OUT]  (env: SCALES="8 100 1000" classes; WORKERS=2; BATCHES=20)
# Disk: the packed dataset (~2x its JPEG bytes with the staged copy) per scale, removed after.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/scale}
SCALES=${SCALES:-8 100 1000}
WORKERS=${WORKERS:-2}
BATCHES=${BATCHES:-20}
PY=/usr/bin/python3
PACK=$PWD/build/tools/pack/shardkit-pack
BENCH=$PWD/build/tools/bench/shardkit-bench
source scripts/deps.sh
shardkit_install_deps mate-backgrounds python3-skimage time
[ -x "$BENCH" ] || shardkit_build build
mkdir -p "$OUT"

# A pool of ~2,000 small JPEGs (long side 160, quality 85: ~7 KB, like the
# small real-photo JPEGs of the study this reproduces), then the tree.
if [ ! -d "$OUT/pool" ]; then
  $PY scripts/make_jpeg_set.py "$OUT/pool" --per-class 143 --long-side 160 --quality 85 > /dev/null
fi
if [ ! -f "$OUT/tree/.complete" ]; then
  echo "== linking the 1000 x 1281 tree"
  $PY - "$OUT/pool" "$OUT/tree" <<'EOF'
import os, sys
pool = sorted(os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in fs)
root = sys.argv[2]
k = 0
for c in range(1000):
    cdir = os.path.join(root, "n%08d" % c)
    os.makedirs(cdir, exist_ok=True)
    for i in range(1281):
        dst = os.path.join(cdir, "n%08d_%05d.JPEG" % (c, i))
        if not os.path.exists(dst):
            os.link(pool[k % len(pool)], dst)
        k += 1
open(os.path.join(root, ".complete"), "w").close()
EOF
fi

timed() {  # LABEL command...: appends "LABEL seconds peak_kb" to $OUT/times
  local label=$1; shift
  /usr/bin/time -f "$label %e %M" -a -o "$OUT/times" "$@"
}
: > "$OUT/times"
echo "records,pack_s,pack_files_per_s,pack_peak_mb,verify_s,inspect_s,open_s,open_mb,rank_peak_mb,cold_ips,warm_ips,cold_read_per_record,direct_ips,direct_read_per_record,stage_s,stage_gb_per_s,dataset_gb" > "$OUT/scale.csv"
for classes in $SCALES; do
  src="$OUT/tree-$classes"
  rm -rf "$src" && mkdir -p "$src"
  for c in $(seq 0 $((classes - 1))); do ln -s "$PWD/$OUT/tree/$(printf 'n%08d' "$c")" "$src/"; done
  records=$((classes * 1281))
  ds="$OUT/ds-$classes"
  echo "== $records records"
  timed "pack-$classes" "$PACK" imagenet "$src" "$ds" --force --follow-links > "$OUT/pack-$classes.txt" 2>&1
  sync
  timed "verify-$classes" "$PACK" verify "$ds" > /dev/null
  timed "inspect-$classes" "$PACK" inspect "$ds" > /dev/null
  "$BENCH" loader "$ds" --workers "$WORKERS" --batch 256 --transform train --batches "$BATCHES" --repeat 1 \
    --cold --json > "$OUT/cold-$classes.json" 2>/dev/null
  "$BENCH" loader "$ds" --workers "$WORKERS" --batch 256 --transform train --batches "$BATCHES" --repeat 1 \
    --cold --direct on --json > "$OUT/direct-$classes.json" 2>/dev/null
  "$BENCH" loader "$ds" --workers "$WORKERS" --batch 256 --transform train --batches "$BATCHES" --repeat 1 \
    --warmup 3 --json > "$OUT/warm-$classes.json" 2>/dev/null
  staged="$OUT/staged-$classes"
  rm -rf "$staged"
  timed "stage-$classes" env SHARDKIT_PACK="$PACK" slurm/stage.sh "$ds" "$staged" --jobs 4 > "$OUT/stage-$classes.txt"
  $PY - "$OUT" "$classes" "$records" "$ds" >> "$OUT/scale.csv" <<'EOF'
import json, os, sys
out, classes, records, ds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t = {}
for line in open(os.path.join(out, "times")):
    label, secs, kb = line.split()
    t[label] = (float(secs), int(kb))
cold = json.load(open(os.path.join(out, "cold-%s.json" % classes)))[0]
warm = json.load(open(os.path.join(out, "warm-%s.json" % classes)))[0]
direct = json.load(open(os.path.join(out, "direct-%s.json" % classes)))[0]
size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
pack_s, pack_kb = t["pack-" + classes]
stage_s = t["stage-" + classes][0]
print("%d,%.2f,%.0f,%.0f,%.2f,%.2f,%.3f,%.1f,%.0f,%.0f,%.0f,%.2f,%.0f,%.2f,%.2f,%.2f,%.2f" % (
    records, pack_s, records / pack_s, pack_kb / 1024, t["verify-" + classes][0], t["inspect-" + classes][0],
    warm["open_seconds"], cold.get("open_storage_bytes", 0) / 1e6, max(cold["peak_rss_bytes"], warm["peak_rss_bytes"]) / 1e6, cold["images_per_sec"],
    warm["images_per_sec"], cold.get("storage_per_record_byte", 0), direct["images_per_sec"],
    direct.get("storage_per_record_byte", 0), stage_s, size / 1e9 / stage_s, size / 1e9))
EOF
  tail -n 1 "$OUT/scale.csv"
  rm -rf "$staged" "$ds" "$src"
done

$PY - "$OUT" <<'EOF'
import csv, math, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/scale.csv")))
head = ("| records | dataset | pack | pack files/s | pack peak RSS | verify | inspect | loader open (cold: MB read) "
        "| rank peak RSS | cold img/s | warm img/s | cold storage / record bytes | cold, O_DIRECT: img/s, storage / record "
        "| stage.sh |")
lines = [head, "|" + "---:|" * 14]
for r in rows:
    lines.append("| %s | %s GB | %s s | %s | %s MB | %s s | %s s | %s s (%s MB) | %s MB | %s | %s | %sx | %s, %sx | %s s (%s GB/s) |" % (
        r["records"], r["dataset_gb"], r["pack_s"], r["pack_files_per_s"], r["pack_peak_mb"], r["verify_s"],
        r["inspect_s"], r["open_s"], r["open_mb"], r["rank_peak_mb"], r["cold_ips"], r["warm_ips"], r["cold_read_per_record"],
        r["direct_ips"], r["direct_read_per_record"], r["stage_s"], r["stage_gb_per_s"]))
open(out + "/scale.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
# A log-log plot of the seconds each step takes against records, and the rank's memory.
W, H, L, B, T, R = 720, 440, 70, 50, 40, 170
xs = [math.log10(float(r["records"])) for r in rows]
series = [("pack", "pack_s", "#1f77b4"), ("verify", "verify_s", "#ff7f0e"), ("stage.sh", "stage_s", "#2ca02c"),
          ("loader open", "open_s", "#d62728"), ("inspect", "inspect_s", "#9467bd")]
ys = [math.log10(max(float(r[k]), 1e-3)) for _, k, _ in series for r in rows]
x0, x1, y0, y1 = min(xs) - 0.1, max(xs) + 0.1, math.floor(min(ys)), math.ceil(max(ys))
px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
py = lambda y: H - B - (y - y0) / (y1 - y0) * (H - B - T)
svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="%d" y="22" font-size="15">shardkit at ImageNet scale: seconds per step against records</text>' % L]
for e in range(int(y0), int(y1) + 1):
    svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%gs</text>'
               % (L, W - R, py(e), py(e), L - 6, py(e) + 4, 10 ** e))
for r, x in zip(rows, xs):
    svg.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (px(x), H - B + 18, r["records"]))
svg.append('<text x="%d" y="%d" text-anchor="middle">records (log)</text>' % ((L + W - R) // 2, H - 10))
for i, (name, key, color) in enumerate(series):
    pts = " ".join("%.1f,%.1f" % (px(x), py(math.log10(max(float(r[key]), 1e-3)))) for r, x in zip(rows, xs))
    svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (color, pts))
    svg.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - R + 10, T + 20 + 18 * i, color, name))
svg.append("</svg>")
open(out + "/scale.svg", "w").write("\n".join(svg) + "\n")
EOF
