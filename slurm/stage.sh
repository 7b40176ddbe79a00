#!/usr/bin/env bash
# Stage a shardkit dataset from the shared filesystem (GPFS, EBS, NFS) or
# from object storage (s3://BUCKET/PREFIX, http(s)://HOST/PATH, read as
# docs/object_storage.md says) to node-local disk. Run it once per node (in a
# job: srun --ntasks-per-node=1); stagers of one DEST at once take turns, so
# the node downloads once whoever calls it.
#
#   slurm/stage.sh SRC_DATASET [DEST] [--jobs N]
#
# DEST defaults to $SLURM_TMPDIR, else $TMPDIR, else /tmp, plus the dataset's
# name. The staging itself is `shardkit-pack stage` (shard/stage.h: the
# manifest fetched once, space checked first, shards copied N at a time and
# checked against that manifest, intact ones kept, the manifest installed
# last; DEST that is SRC itself left alone); this script picks DEST and names
# the node in what it prints. Exit codes: 0 staged (or nothing to do), 2 any
# error, 130 interrupted.
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
PACK=${SHARDKIT_PACK:-$(command -v shardkit-pack || echo "$(dirname "$0")/../build/tools/pack/shardkit-pack")}
[ -x "$PACK" ] || { echo "stage: shardkit-pack not found (set SHARDKIT_PACK)" >&2; exit 2; }
if [ -z "$DEST" ]; then
  case "$SRC" in
    s3://*|http://*|https://*) name=$(basename -- "${SRC%/}") ;;
    *) name=$(basename -- "$(realpath -m -- "$SRC")") ;;
  esac
  DEST=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/$name
fi
NODE=${SLURMD_NODENAME:-$(hostname)}
# What the stage prints, each line naming this node; its exit code kept.
set +e
"$PACK" stage --jobs "$JOBS" -- "$SRC" "$DEST" 2>&1 | sed -u "s/^/stage[$NODE]: /"
rc=${PIPESTATUS[0]}
exit "$rc"
