#!/usr/bin/env bash
# The SLURM integration test: a real slurmctld and two slurmd on this host as
# two nodes; slurm/train.sbatch across both (stage, verify, Gloo DDP), the
# time-limit signal (checkpoint, requeue, resume), and a 2-point sweep with
# its report. Daemons are stopped at the end whatever happened.
#   tests/slurm/slurm_test.sh BUILD_DIR
# Exit 77 (skipped) when not root or SLURM is not installed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
if [ "$(id -u)" != 0 ]; then echo "SKIP: the SLURM integration test needs root"; exit 77; fi
for c in slurmctld slurmd munged sbatch; do
  command -v $c >/dev/null || { echo "SKIP: $c not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
WORK=$(mktemp -d /tmp/shardkit-slurm-XXXXXX)
source "$ROOT/tests/slurm/cluster.sh"
cleanup() { cluster_stop; rm -rf "$WORK"; }
trap cleanup EXIT
cluster_start "$WORK/cluster"

pass=0 fail=0
check() {  # description, command...
  local what=$1; shift
  if "$@"; then echo "  ok: $what"; pass=$((pass + 1)); else echo "  FAILED: $what"; fail=$((fail + 1)); fi
}
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_job() {  # id, timeout seconds: waits until the job has ended (not requeued)
  local id=$1 t=$2 s
  for _ in $(seq 1 "$t"); do
    s=$(job_state "$id")
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return 0 ;; esac
    sleep 1
  done
  echo "TIMEOUT_WAITING"
}

# A small dataset on "shared storage": Fashion-MNIST's test set, in several shards.
"$BUILD/tools/pack/shardkit-pack" idx --images /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz \
  --labels /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz --shard-size 2000000 "$WORK/shared/fashion" > /dev/null
export DATA=$WORK/shared/fashion SHARDKIT_BIN=$BUILD LOCAL_BASE=$WORK/local ARCH=tiny LR=0.2
cd "$ROOT"

echo "== case 1: train.sbatch across 2 nodes (1 task per node, Gloo)"
export EPOCHS=1 BATCH=16 EXTRA="--max-steps 30 --print-every 10"
rc=0
sbatch -W --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --job-name=case1 --output="$WORK/case1.out" \
  --chdir="$ROOT" slurm/train.sbatch > "$WORK/case1.sbatch" || rc=$?
id1=$(grep -o '[0-9]\+' "$WORK/case1.sbatch" | head -n1)
cat "$WORK/case1.out"
check "job succeeded" test "$rc" = 0
check "node n1 staged and verified its copy" grep -q "stage\[n1\]: .*(verified)" "$WORK/case1.out"
check "node n2 staged and verified its copy" grep -q "stage\[n2\]: .*(verified)" "$WORK/case1.out"
check "both nodes hold a verified dataset" bash -c "'$BUILD/tools/pack/shardkit-pack' verify '$WORK/local/n1/train' && '$BUILD/tools/pack/shardkit-pack' verify '$WORK/local/n2/train'"
check "2 ranks trained together over Gloo (rank and world from SLURM)" grep -q "DDP over gloo: 2 ranks (SLURM variables)" "$WORK/case1.out"
check "metrics file exists with the epoch line" grep -q '"world_size":2' "$ROOT/metrics/case1-$id1.jsonl"

echo "== case 2: time-limit signal -> checkpoint, requeue, resume"
rm -rf "$WORK/local"
export EPOCHS=1 BATCH=4 EXTRA="--max-steps 1500 --print-every 25"
id2=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --job-name=case2 \
      --output="$WORK/case2.out" --chdir="$ROOT" slurm/train.sbatch)
for _ in $(seq 1 120); do grep -q "step 100/" "$WORK/case2.out" 2>/dev/null && break; sleep 1; done
scancel --signal=USR1 "$id2"   # what --signal=USR1@300 sends before the time limit
state=$(wait_job "$id2" 300)
cat "$WORK/case2.out"
check "job completed after the signal ($state)" test "$state" = COMPLETED
check "ranks checkpointed on the signal" grep -q "checkpoint written to" "$WORK/case2.out"
check "the job requeued itself" grep -q "requeueing job $id2" "$WORK/case2.out"
check "the requeued run resumed from the checkpoint" grep -q "resumed from .*last.pt" "$WORK/case2.out"
check "and finished" grep -q "finished; metrics in" "$WORK/case2.out"

echo "== case 3: a 2-point sweep (1 and 2 nodes) and its report"
export EPOCHS=1 EXTRA="--max-steps 40"
slurm/sweep.sh --nodes 1,2 --ranks-per-node 1 --workers 1 --batch 16 --out "$WORK/sweep" --wait | tee "$WORK/sweep.txt"
check "report table has both runs" bash -c "grep -c '^| n[12]_r1_w1_b16 ' '$WORK/sweep/report.md' | grep -qx 2"
check "speedup plot against GPUs" test -s "$WORK/sweep/speedup_vs_ranks.svg"
check "epoch time plot against nodes" test -s "$WORK/sweep/epoch_time_vs_nodes.svg"
if [ -n "${SHARDKIT_SLURM_KEEP:-}" ]; then mkdir -p "$SHARDKIT_SLURM_KEEP"; cp "$WORK/sweep"/report.* "$WORK/sweep"/*.svg "$SHARDKIT_SLURM_KEEP"/; fi
rm -rf "$ROOT/metrics/case1-$id1.jsonl" "$ROOT/metrics/case2-$id2.jsonl" "$ROOT/checkpoints/case1-$id1" "$ROOT/checkpoints/case2-$id2"
rmdir "$ROOT/metrics" "$ROOT/checkpoints" 2>/dev/null || true

echo "slurm: $pass passed, $fail failed"
[ "$fail" = 0 ]
