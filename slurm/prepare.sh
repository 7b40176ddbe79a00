#!/usr/bin/env bash
# Prepare a dataset across a SLURM job array, then merge it: submits
# slurm/prepare.sbatch as an array of N parts into PARTS_DIR, and a merge job
# that runs once every part succeeded (--dependency=afterok): shardkit-pack
# merge OUT PARTS_DIR/part-0 .. part-<N-1>, then shardkit-pack verify OUT.
#
#   slurm/prepare.sh --parts 16 --parts-dir /gpfs/ds/h5-parts --out /gpfs/ds/h5 [--wait] \
#       [--sbatch "--cpus-per-task=16 --time=2:00:00"] -- shardkit-pack hdf5 data.h5 --images /x --labels /y
#
# The command comes after --, without OUT, --part and --threads. Prints both
# job ids; with --wait it waits for the merge job and exits 0 only if the
# merged dataset verified. Logs: PARTS_DIR/prepare-<array>_<I>.out, merge-<id>.out. The parts stay in PARTS_DIR (the
# merged dataset shares their files where it could hard-link them): remove
# them once you no longer need them, never modify them in place.
set -euo pipefail
# Not cd'ing: the command's relative paths are the caller's (the tasks start there).
REPO=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "usage: $0 --parts N --parts-dir DIR --out OUT [--wait] [--sbatch 'OPTIONS'] -- COMMAND..." >&2
  exit 2
}
PARTS="" PARTS_DIR="" OUT="" WAIT=0 SBATCH_EXTRA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) [ $# -ge 2 ] || usage; PARTS=$2; shift 2 ;;
    --parts-dir) [ $# -ge 2 ] || usage; PARTS_DIR=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    --sbatch) [ $# -ge 2 ] || usage; SBATCH_EXTRA=$2; shift 2 ;;
    --wait) WAIT=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "prepare.sh: unknown option $1" >&2; usage ;;
  esac
done
if [ $# -eq 0 ] || [ -z "$PARTS_DIR" ] || [ -z "$OUT" ]; then usage; fi
case "$PARTS" in ''|*[!0-9]*) echo "prepare.sh: --parts '$PARTS' is not a number of parts" >&2; exit 2 ;; esac
[ "$PARTS" -ge 1 ] || { echo "prepare.sh: --parts must be at least 1" >&2; exit 2; }
mkdir -p "$PARTS_DIR"
PARTS_DIR=$(realpath "$PARTS_DIR")
OUT=$(realpath -m "$OUT")
BIN=${SHARDKIT_BIN:-$REPO/build}
PACK=$BIN/tools/pack/shardkit-pack
[ -x "$PACK" ] || PACK=$(command -v shardkit-pack) || { echo "prepare.sh: shardkit-pack not found (set SHARDKIT_BIN)" >&2; exit 2; }

# The command as one shell-quoted line, for prepare.sbatch's PREPARE.
PREPARE=$(printf '%q ' "$@")
export PREPARE PARTS_DIR SHARDKIT_BIN=$BIN  # prepare.sbatch's settings (sbatch passes them on)
# shellcheck disable=SC2086  # SBATCH_EXTRA is a list of options
array=$(sbatch --parsable --array=0-$((PARTS - 1)) --output="$PARTS_DIR/prepare-%A_%a.out" $SBATCH_EXTRA \
        "$REPO/slurm/prepare.sbatch")
array=${array%%;*}
echo "prepare.sh: array job $array: $PARTS parts into $PARTS_DIR (logs: prepare-${array}_I.out)"
parts=()
for ((i = 0; i < PARTS; i++)); do parts+=("$PARTS_DIR/part-$i"); done
merge="$(printf '%q ' "$PACK" merge "$OUT" "${parts[@]}") && $(printf '%q ' "$PACK" verify "$OUT")"
wait=(); [ "$WAIT" = 1 ] && wait=(--wait)
set +e
merge_id=$(sbatch --parsable "${wait[@]}" --dependency=afterok:"$array" --kill-on-invalid-dep=yes \
           --job-name=shardkit-merge --ntasks=1 --output="$PARTS_DIR/merge-%j.out" --wrap "$merge")
rc=$?
set -e
merge_id=${merge_id%%;*}
echo "prepare.sh: merge job $merge_id runs after every part succeeded; log $PARTS_DIR/merge-$merge_id.out"
[ "$WAIT" = 1 ] || exit "$rc"
# sbatch --wait exits 0 for a job cancelled unrun (a part failed: the
# dependency can never be met), so the job's own state decides.
state=$(scontrol show job "$merge_id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
cat "$PARTS_DIR/merge-$merge_id.out" 2>/dev/null || true
if [ "$rc" = 0 ] && [ "${state:-COMPLETED}" = COMPLETED ] && [ -f "$OUT/manifest.json" ]; then
  echo "prepare.sh: $OUT merged and verified"
  exit 0
fi
echo "prepare.sh: no dataset in $OUT: the merge job ended ${state:-?} (exit $rc); a part failed?" \
     "see $PARTS_DIR/prepare-${array}_*.out" >&2
exit $((rc == 0 ? 1 : rc))
