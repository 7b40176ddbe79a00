#!/usr/bin/env bash
# Stage a shardkit dataset from the shared filesystem (GPFS, EBS, NFS) or
# from object storage (s3://BUCKET/PREFIX, http(s)://HOST/PATH, read as
# docs/object_storage.md says) to node-local disk. Run it once per node (in a
# job: srun --ntasks-per-node=1); stagers of one DEST at once take turns (a
# lock in DEST), so the node downloads once whoever calls it.
#
#   slurm/stage.sh SRC_DATASET [DEST] [--jobs N]
#
# DEST defaults to $SLURM_TMPDIR, else $TMPDIR, else /tmp, plus the dataset's
# name. Shards are copied N at a time under temporary names, checked against
# the manifest (size and CRC32C) and renamed; shards already staged and intact
# are skipped; the manifest is copied last, so a half-staged dataset never
# looks complete. Fails clearly when local space is short. Reports GB/s.
# A DEST that is SRC itself (the same directory by path, symlink or mount) is
# left alone: the source is never modified. Exit codes: 0 staged (or nothing
# to do), 2 any error.
set -euo pipefail

usage() { echo "usage: $0 SRC_DATASET [DEST] [--jobs N]" >&2; exit 2; }
SRC="" DEST="" JOBS=${STAGE_JOBS:-8}
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) [ $# -ge 2 ] || usage; JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    -h|--help) echo "usage: $0 SRC_DATASET [DEST] [--jobs N]"; exit 0 ;;
    *) if [ -z "$SRC" ]; then SRC=$1; elif [ -z "$DEST" ]; then DEST=$1; else usage; fi; shift ;;
  esac
done
[ -n "$SRC" ] || usage
case "$JOBS" in ''|*[!0-9]*) echo "stage: --jobs '$JOBS' is not an integer in 1..64" >&2; exit 2 ;; esac
[ "$JOBS" -ge 1 ] && [ "$JOBS" -le 64 ] || { echo "stage: --jobs $JOBS is not in 1..64" >&2; exit 2; }
PACK=${SHARDKIT_PACK:-$(command -v shardkit-pack || echo "$(dirname "$0")/../build/tools/pack/shardkit-pack")}
[ -x "$PACK" ] || { echo "stage: shardkit-pack not found (set SHARDKIT_PACK)" >&2; exit 2; }
case "$SRC" in s3://*|http://*|https://*) REMOTE=1 ;; *) REMOTE=0 ;; esac
if [ "$REMOTE" = 0 ] && [ ! -f "$SRC/manifest.json" ]; then
  echo "stage: $SRC is not a shardkit dataset (no manifest.json)" >&2; exit 2
fi
if [ -z "$DEST" ]; then
  name=$([ "$REMOTE" = 1 ] && basename "${SRC%/}" || basename "$(realpath "$SRC")")
  DEST=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/$name
fi
NODE=${SLURMD_NODENAME:-$(hostname)}
# Staging onto the source: same resolved path, or (through a bind mount or a
# symlinked parent) the same directory inode. Nothing to copy, nothing to touch.
same_dir() { [ -d "$2" ] && [ "$(stat -L -c %d:%i "$1")" = "$(stat -L -c %d:%i "$2")" ]; }
if [ "$REMOTE" = 0 ] && { [ "$(realpath -m "$DEST")" = "$(realpath -m "$SRC")" ] || same_dir "$SRC" "$DEST"; }; then
  echo "stage[$NODE]: $DEST is the source dataset itself; nothing to stage (source left untouched)"
  exit 0
fi
# Nor inside it: the staged copy would be written into the source.
if [ "$REMOTE" = 0 ]; then
  case "$(realpath -m "$DEST")/" in
    "$(realpath -m "$SRC")"/*)
      echo "stage: $DEST is inside the source dataset $SRC; stage elsewhere" >&2; exit 2 ;;
  esac
fi
mkdir -p "$DEST" 2>/dev/null && [ -d "$DEST" ] && [ -w "$DEST" ] || {
  echo "stage[$NODE]: $DEST: cannot be made a writable directory" >&2; exit 2
}
# One stager of DEST at a time: the node's ranks (or jobs) that stage the same
# dataset there wait for the first, then find every shard intact. Opened for
# appending (never truncated), and never through a link left there.
[ -L "$DEST/.stage.lock" ] && rm -f "$DEST/.stage.lock"
exec 9>>"$DEST/.stage.lock"
flock 9
# What a killed stager left half-copied (never renamed into place) goes.
rm -f "$DEST"/.*.staging.* 2>/dev/null || true
rm -rf "$DEST"/.manifest-staging.* 2>/dev/null || true

# One file of the source to a local file: cp, or a download.
fetch() {  # SRC_FILE DST_FILE
  if [ "$REMOTE" = 1 ]; then "$PACK" get "$1" "$2" ${3:+--manifest "$3"} >/dev/null; else cp "$1" "$2"; fi
}
export -f fetch
export REMOTE

# The source manifest, fetched once: the shards are listed from this copy
# and checked against it, and this copy is what is installed at the end (a
# manifest replaced at the source meanwhile, by a push --force, never sits
# over shards checked against the one before it).
MAN="$DEST/.manifest-staging.$$"
mkdir -p "$MAN"
trap 'rm -rf "$MAN"' EXIT
fetch "$SRC/manifest.json" "$MAN/manifest.json" || { rm -rf "$MAN"; exit 2; }
# file<TAB>bytes<TAB>crc32c, from that manifest.
LIST=$("$PACK" inspect --shards "$MAN") || { rm -rf "$MAN"; exit 2; }
need=0
while IFS=$'\t' read -r file bytes crc; do
  # Never open a FIFO or device for reading: cp would block on it.
  if [ "$REMOTE" = 0 ] && [ ! -f "$SRC/$file" ]; then
    echo "stage[$NODE]: $SRC/$file: missing or not a regular file" >&2; exit 2
  fi
  if [ -f "$DEST/$file" ] && [ "$(stat -c %s "$DEST/$file")" = "$bytes" ]; then continue; fi
  need=$((need + bytes))
done <<< "$LIST"
avail=$(df -B1 --output=avail "$DEST" | tail -n 1 | tr -d ' ')
if [ "$need" -gt "$avail" ]; then
  echo "stage[$NODE]: not enough space in $DEST: need $need bytes, $avail available" >&2
  rm -rf "$MAN"
  exit 2
fi

# A staged manifest is only valid once every shard is; remove it first.
rm -f "$DEST/manifest.json"

stage_one() {  # file bytes crc
  local file=$1 bytes=$2 crc=$3 dst="$DEST/$1" tmp
  if [ -f "$dst" ] && [ "$(stat -c %s "$dst")" = "$bytes" ] && \
     [ "$("$PACK" checksum "$dst" | cut -f1)" = "$crc" ]; then
    echo skipped
    return 0
  fi
  tmp="$DEST/.$file.staging.$$.$RANDOM"
  fetch "$SRC/$file" "$tmp" "$MAN/manifest.json" || { rm -f "$tmp"; return 1; }
  local got
  got=$("$PACK" checksum "$tmp" | cut -f1)
  if [ "$got" != "$crc" ]; then
    rm -f "$tmp"
    echo "stage[$NODE]: $file: checksum $got after copy, manifest says $crc" >&2
    return 1
  fi
  mv -f "$tmp" "$dst"
  echo "copied $bytes"
}
export -f stage_one
export DEST SRC PACK NODE MAN

start=$(date +%s.%N)
results=$(printf '%s\n' "$LIST" | xargs -P "$JOBS" -L 1 bash -c 'stage_one "$0" "$1" "$2"') || {
  echo "stage[$NODE]: failed; rerun to resume (intact shards are kept)" >&2
  rm -f "$DEST"/.*.staging.* 2>/dev/null || true
  rm -rf "$MAN"
  exit 2
}
end=$(date +%s.%N)
copied=$(grep -c copied <<< "$results" || true)
copied_bytes=$(awk '/^copied/ {s += $2} END {print s + 0}' <<< "$results")
skipped=$(grep -c skipped <<< "$results" || true)
mv -f "$MAN/manifest.json" "$DEST/manifest.json"
rmdir "$MAN"
awk -v b="$copied_bytes" -v s="$start" -v e="$end" -v c="$copied" -v k="$skipped" -v n="$NODE" -v d="$DEST" 'BEGIN {
  t = e - s; if (t <= 0) t = 1e-9
  u = b >= 1e9 ? "GB" : "MB"; f = b >= 1e9 ? 1e9 : 1e6
  printf "stage[%s]: %d shards copied, %d already intact, %.2f %s in %.2f s = %.2f %s/s -> %s (verified)\n", n, c, k, b / f, u, t, b / f / t, u, d
}'
