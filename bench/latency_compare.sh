#!/usr/bin/env bash
# Network storage on one machine: the same real-photo JPEG set and its shards
# read cold through delayfs (bench/delayfs.c, a FUSE passthrough that adds a
# fixed delay to every read) at 0.5, 2 and 5 ms, side by side in one run:
#   shardkit   1 and 2 workers; full and block-local shuffle; buffered and
#              O_DIRECT reads; with the read queue (--read-depth 32, the
#              default) and without it (--read-depth 0, the previous loader)
#   DataLoader ImageFolder + RandomResizedCrop + flip, 2 and 8 workers
# against shardkit's own rate from local disk (the same configuration, cold).
# Train transform at 224 px. Writes $OUT/latency.md and latency.csv.
#
# usage: bench/latency_compare.sh [OUT]   (env: DELAYS_MS="0.5 2 5" PER_CLASS=100 BATCHES=20 REPEAT=2)
# Needs root (FUSE mounts), fuse3 and libfuse3-dev; unmounts what it mounted.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/latency}
DELAYS_MS=${DELAYS_MS:-"0.5 2 5"}
PER_CLASS=${PER_CLASS:-100}
BATCHES=${BATCHES:-20}
REPEAT=${REPEAT:-2}
PY=${PYTHON:-/usr/bin/python3}
BENCH=build/tools/bench/shardkit-bench
[ -x "$BENCH" ] && [ -x build/tools/pack/shardkit-pack ] || { echo "latency_compare: build first (cmake --build build)" >&2; exit 2; }
command -v pkg-config >/dev/null && pkg-config --exists fuse3 ||
  { echo "latency_compare: needs fuse3 and libfuse3-dev (apt-get install fuse3 libfuse3-dev)" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
data=$OUT/data mnt=$OUT/mnt
mkdir -p "$data" "$mnt"
cc -O2 -o "$OUT/delayfs" bench/delayfs.c $(pkg-config --cflags --libs fuse3)
cleanup() { mountpoint -q "$mnt" && fusermount3 -u "$mnt" || true; }
trap cleanup EXIT
source bench/jpeg_set.sh
bench_jpeg_shards "$data/jpeg" "$data/shards" "$PER_CLASS"
echo "storage,delay_ms,loader,workers,shuffle,reads,read_depth,images_per_sec,reads_in_flight,read_ms" >"$OUT/latency.csv"

# One shardkit configuration: images/s (best of REPEAT cold rounds), reads in flight, ms per read.
shardkit() { # DIR WORKERS SHUFFLE DIRECT DEPTH
  "$BENCH" loader "$1" --workers "$2" --shuffle "$3" --direct "$4" --read-depth "$5" --batch 32 \
    --batches "$BATCHES" --repeat "$REPEAT" --transform train --size 224 --cold --json 2>/dev/null |
    "$PY" -c 'import json,sys; r=json.load(sys.stdin)[0]; print("%.0f %.1f %.2f" % (r["images_per_sec"], r.get("reads_in_flight_mean", 0), r.get("read_latency_ms", 0)))'
}
dataloader() { # DIR WORKERS
  "$PY" bench/pytorch_loader.py imagefolder "$1" --workers "$2" --batch 32 --batches "$BATCHES" \
    --repeat "$REPEAT" --cold 2>/dev/null | "$PY" -c 'import json,sys; print("%.0f" % json.loads(sys.stdin.readline())["images_per_sec"])'
}

run_all() { # STORAGE DELAY_MS ROOT
  local w shuf dir depth r
  for w in 1 2; do
    for shuf in full block; do
      for dir in off on; do
        [ "$shuf" = block ] && [ "$dir" = on ] && continue  # O_DIRECT is a full-shuffle read path
        for depth in 32 0; do
          r=$(shardkit "$3/shards" "$w" "$shuf" "$dir" "$depth")
          echo "$1,$2,shardkit,$w,$shuf,$([ "$dir" = on ] && echo direct || echo buffered),$depth,${r// /,}" >>"$OUT/latency.csv"
          printf '  %-6s %4s ms  shardkit w%d %-5s %-8s depth %2d: %s img/s\n' "$1" "$2" "$w" "$shuf" "$dir" "$depth" "${r%% *}"
        done
      done
    done
  done
  for w in 2 8; do
    r=$(dataloader "$3/jpeg" "$w")
    echo "$1,$2,DataLoader,$w,full,buffered,-,$r,," >>"$OUT/latency.csv"
    printf '  %-6s %4s ms  DataLoader w%d: %s img/s\n' "$1" "$2" "$w" "$r"
  done
}

echo "== local disk (cold)"
run_all local 0 "$data"
for d in $DELAYS_MS; do
  us=$("$PY" -c "print(int(float('$d') * 1000))")
  echo "== delayfs, $d ms per read (cold)"
  "$OUT/delayfs" -o source="$data",delay_us="$us",max_threads=128 "$mnt"  # a parallel filesystem: many requests served at once
  run_all delayfs "$d" "$mnt"
  fusermount3 -u "$mnt"
done

"$PY" - "$OUT/latency.csv" >"$OUT/latency.md" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
local = {(r["loader"], r["workers"], r["shuffle"], r["reads"], r["read_depth"]): float(r["images_per_sec"])
         for r in rows if r["storage"] == "local"}
delays = sorted({r["delay_ms"] for r in rows if r["storage"] == "delayfs"}, key=float)
print("Cold reads, train transform at 224 px, batch 32; images/s, and in brackets the rate as a fraction")
print("of the same configuration's from local disk. Reads in flight and ms per read are the read queue's.\n")
print("| loader | workers | shuffle | reads | read depth | local | " + " | ".join("%s ms" % d for d in delays) + " |")
print("|---|---:|---|---|---:|---:|" + "---:|" * len(delays))
for key, base in local.items():
    cells = []
    for d in delays:
        m = [r for r in rows if r["storage"] == "delayfs" and r["delay_ms"] == d and
             (r["loader"], r["workers"], r["shuffle"], r["reads"], r["read_depth"]) == key]
        if not m:
            cells.append("-")
            continue
        r = m[0]
        v = float(r["images_per_sec"])
        extra = " ({:.2f}x; {} in flight, {} ms)".format(v / base, r["reads_in_flight"], r["read_ms"]) \
            if r["reads_in_flight"] not in ("", "0.0") else " ({:.2f}x)".format(v / base)
        cells.append("%.0f%s" % (v, extra))
    print("| %s | %s | %s | %s | %s | %.0f | %s |" % (key[0], key[1], key[2], key[3], key[4], base, " | ".join(cells)))
EOF
cat "$OUT/latency.md"
