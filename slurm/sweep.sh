#!/usr/bin/env bash
# Submit a scaling grid of slurm/train.sbatch runs, then (with --wait) report.
#
#   DATA=/gpfs/ds/imagenet-train slurm/sweep.sh --nodes 1,2,4 --ranks-per-node 4 --workers 4,8 \
#       --batch 256 [--global-batch 1024] [--gpus] [--epochs 1] [--out sweep-DIR] [--wait] \
#       [-- extra sbatch options]
#
# Every combination is one job; its metrics go to OUT/n<N>_r<R>_w<W>_b<B>.jsonl.
# --batch B runs each point at B per rank (weak scaling: the work per rank is
# fixed); --global-batch G at G / ranks per rank (strong scaling: the global
# batch is fixed; G must divide evenly); both may be given, and a point both
# ask for runs once. The report has a table for each. --gpus requests one GPU
# per rank (--gpus-per-node=R). With --wait the script waits for every job
# and runs slurm/report on OUT. Settings for train.sbatch (ARCH, EXTRA, ...)
# pass through the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=1 RANKS=1 WORKERS=2 BATCH="" GLOBAL="" EPOCHS=${EPOCHS:-1} OUT=sweep-$(date +%Y%m%d-%H%M%S) WAIT=0 GPUS=0
SBATCH_EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=$2; shift 2 ;;
    --ranks-per-node) RANKS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --global-batch) GLOBAL=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --gpus) GPUS=1; shift ;;
    --wait) WAIT=1; shift ;;
    --) shift; SBATCH_EXTRA=("$@"); break ;;
    *) echo "sweep.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
: "${DATA:?set DATA to the training dataset}"
[ -n "$BATCH$GLOBAL" ] || BATCH=256
for n in ${NODES//,/ }; do  # every point checked before any is submitted
  for r in ${RANKS//,/ }; do
    for g in ${GLOBAL//,/ }; do
      if [ $((g % (n * r))) -ne 0 ] || [ $((g / (n * r))) -lt 1 ]; then
        echo "sweep.sh: --global-batch $g does not divide over $n x $r ranks" >&2; exit 2
      fi
    done
  done
done
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
jobs=()
declare -A submitted
submit() {  # NODES RANKS_PER_NODE WORKERS BATCH_PER_RANK
  local n=$1 r=$2 w=$3 b=$4 name="n$1_r$2_w$3_b$4" id gpu=()
  [ -z "${submitted[$name]:-}" ] || return 0
  submitted[$name]=1
  [ "$GPUS" = 1 ] && gpu=(--gpus-per-node="$r")
  id=$(METRICS="$OUT/$name.jsonl" CKPT_DIR="$OUT/checkpoints/$name" BATCH=$b EPOCHS=$EPOCHS WORKERS=$w \
       sbatch --parsable --job-name="sweep-$name" --nodes="$n" --ntasks-per-node="$r" \
              --cpus-per-task=$((w + 1)) --output="$OUT/$name.out" "${gpu[@]}" "${SBATCH_EXTRA[@]}" \
              slurm/train.sbatch)
  echo "submitted $name as job $id"
  jobs+=("$id")
}
for n in ${NODES//,/ }; do
  for r in ${RANKS//,/ }; do
    for w in ${WORKERS//,/ }; do
      for b in ${BATCH//,/ }; do submit "$n" "$r" "$w" "$b"; done
      for g in ${GLOBAL//,/ }; do submit "$n" "$r" "$w" $((g / (n * r))); done
    done
  done
done
echo "${jobs[*]}" > "$OUT/jobs"
if [ "$WAIT" = 1 ]; then
  echo "waiting for ${#jobs[@]} job(s)..."
  while squeue -h -j "$(IFS=,; echo "${jobs[*]}")" 2>/dev/null | grep -q .; do sleep 2; done
  for id in "${jobs[@]}"; do
    state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
    echo "job $id: ${state:-finished}"
  done
  slurm/report "$OUT"
fi
