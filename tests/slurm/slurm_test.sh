#!/usr/bin/env bash
# The SLURM integration test: a real slurmctld and two slurmd on this host as
# two nodes; slurm/train.sbatch across both (stage, verify, Gloo DDP), the
# time-limit signal (checkpoint, requeue, resume), a 2-point sweep with its
# weak- and strong-scaling report, a job preempted on 2 nodes and requeued
# onto 1 that resumes mid-epoch (issue 35), a dataset prepared by a job array
# and merged by a dependent job (issue 34), and ranks started by a bare srun. Daemons are stopped at the end whatever happened.
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

pass=0 fail=0 failed=()
check() {  # description, command...
  local what=$1; shift
  if "$@"; then echo "  ok: $what"; pass=$((pass + 1)); else
    echo "  FAILED: $what"; fail=$((fail + 1)); failed+=("$what"); fi
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
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "\b$2=[^ ]*" | head -n1 | cut -d= -f2- || true; }
has() { grep -q -- "$2" <<< "$1"; }  # text, pattern
# Polls (5 times a second) until the command succeeds or the job has ended;
# returns 1 on either of those failures, saying which.
wait_for() {  # id, timeout seconds, description, command...
  local id=$1 t=$2 what=$3; shift 3
  local end=$((SECONDS + t)) s
  until "$@"; do
    s=$(job_state "$id")
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)
      echo "  (job $id ended, $s, while waiting for $what)"; return 1 ;; esac
    [ $SECONDS -lt $end ] || { echo "  (timed out after ${t}s waiting for $what)"; return 1; }
    sleep 0.2
  done
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
# The signal only once training has begun (its handlers are installed by then);
# sent earlier, during staging, it would end the job instead of checkpointing it.
if wait_for "$id2" 600 "run 1's progress" grep -qs "step 100/" "$WORK/case2.out"; then
  scancel --signal=USR1 "$id2"   # what --signal=USR1@300 sends before the time limit
else
  scancel "$id2" 2>/dev/null || true
fi
state=$(wait_job "$id2" 600)
cat "$WORK/case2.out"
check "job completed after the signal ($state)" test "$state" = COMPLETED
check "ranks checkpointed on the signal" grep -q "checkpoint written to" "$WORK/case2.out"
check "the job requeued itself" grep -q "requeueing job $id2" "$WORK/case2.out"
check "the requeued run resumed from the checkpoint" grep -q "resumed from .*last.pt" "$WORK/case2.out"
check "and finished" grep -q "finished; metrics in" "$WORK/case2.out"

echo "== case 3: a sweep over 1 and 2 nodes, weak (16 per rank) and strong (16 in all), and its report"
export EPOCHS=1 EXTRA="--max-steps 40"
slurm/sweep.sh --nodes 1,2 --ranks-per-node 1 --workers 1 --batch 16 --global-batch 16 --out "$WORK/sweep" --wait \
  | tee "$WORK/sweep.txt"
check "three runs, the 1-node one shared by both tables" test "$(grep -c '^submitted ' "$WORK/sweep.txt")" = 3
check "report table has every run" bash -c "grep -c '^| n[12]_r1_w1_b\(16\|8\) ' '$WORK/sweep/report.md' | grep -qx 3"
check "a weak-scaling table: 1 and 2 ranks at 16 per rank" bash -c \
  "grep -A6 '^### Weak scaling: batch per rank 16' '$WORK/sweep/report.md' | grep -c '^| [12] | [12] | 16 |' | grep -qx 2"
check "a strong-scaling table: 16 in all over 1 and 2 ranks" bash -c \
  "grep -A6 '^### Strong scaling: global batch 16' '$WORK/sweep/report.md' | grep -c '^| [12] | [12] | \(16\|8\) | 16 |' | grep -qx 2"
check "speedup plot against GPUs" test -s "$WORK/sweep/speedup_vs_ranks.svg"
check "epoch time plot against nodes" test -s "$WORK/sweep/epoch_time_vs_nodes.svg"
if [ -n "${SHARDKIT_SLURM_KEEP:-}" ]; then mkdir -p "$SHARDKIT_SLURM_KEEP"; cp "$WORK/sweep"/report.* "$WORK/sweep"/*.svg "$SHARDKIT_SLURM_KEEP"/; fi
echo "== case 4: preempted on 2 nodes, requeued onto 1 (scontrol requeue, then NumNodes=1): resumes mid-epoch and finishes"
# A requeued job often comes back on another node count. The first run (2
# nodes, 2 ranks) is stopped mid-epoch by the signal SLURM sends before a time
# limit or preemption; train.sbatch checkpoints and runs `scontrol requeue`;
# while the job is pending again the test shrinks it to 1 node and 1 task
# (NumNodes alone is not enough: the job's 2 tasks at 1 per node would still
# need 2 nodes); the second run must be 1 rank, resume from that checkpoint
# mid-epoch, and finish. Every wait is on a state, never a fixed sleep.
t4=$SECONDS
rm -rf "$WORK/local"
out4=$WORK/case4.out
export EPOCHS=2 BATCH=4 EXTRA="--print-every 50"
id4=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --job-name=case4 \
      --output="$out4" --chdir="$ROOT" slurm/train.sbatch)
ckpt4=$ROOT/checkpoints/case4-$id4/last.pt
requeued() { [ "$(job_state "$1")" = PENDING ] && [ "$(job_field "$1" Restarts)" -ge 1 ] 2>/dev/null; }
ok4=1
echo "case 4: waiting for run 1 to train mid-way through epoch 1 on 2 ranks (progress line 'step 50/')"
wait_for "$id4" 600 "run 1's progress" grep -qs "step 50/" "$out4" || ok4=0
if [ $ok4 = 1 ]; then
  echo "case 4: sending USR1 to every rank (as --signal=USR1@300 or a preemption notice would)"
  scancel --signal=USR1 "$id4"
  echo "case 4: waiting for the checkpoint and train.sbatch's 'scontrol requeue' (job PENDING, Restarts=1)"
  wait_for "$id4" 600 "the requeue" requeued "$id4" || ok4=0
fi
# Resize and start the pending job. Each step is retried until SLURM shows its
# effect (the requeue's cleanup may still be settling when the job first reads
# PENDING, and an update made then can be refused or undone): NumNodes=1,
# not held, no BeginTime in the future; done once the job runs or has ended.
resize_and_start() {  # id
  local r
  [ "$(job_field "$1" NumNodes)" = 1 ] || scontrol update JobId="$1" NumNodes=1 NumTasks=1 || return 1
  r=$(job_field "$1" Reason)
  case "$r" in JobHeld*) echo "case 4: the job is held ($r): scontrol release $1"; scontrol release "$1" || true ;; esac
  # A requeued job waits out its old credentials' lifetime (cred_expire, 120 s)
  # before it may start again; the administrator who resized it starts it now.
  [ "$r" != BeginTime ] || scontrol update JobId="$1" StartTime=now || true
  [ "$(job_state "$1")" != PENDING ]
}
if [ $ok4 = 1 ]; then
  echo "case 4: pending again ($(job_field "$id4" Reason)); scontrol update JobId=$id4 NumNodes=1 NumTasks=1, StartTime=now"
  wait_for "$id4" 600 "the resized job to start" resize_and_start "$id4" 2>&1 | sort -u || true
  [ "$(job_field "$id4" NumNodes)" = 1 ] || ok4=0
fi
if [ $ok4 != 1 ]; then echo "case 4: not as planned; the job now:"; scontrol show job "$id4" || true; fi
[ $ok4 = 1 ] || scancel "$id4" 2>/dev/null || true  # not as planned: end it rather than wait it out
state4=$(wait_job "$id4" 600)
if [ "$state4" != COMPLETED ]; then echo "case 4: the job ended $state4:"; scontrol show job "$id4" || true; fi
echo "case 4: job $id4 ended $state4 after $((SECONDS - t4)) s; its output (progress lines cut):"
grep -v '^epoch [0-9]*/[0-9]*  step ' "$out4" || true
run1=$(sed -n '/(restart 0)/,/(restart 1)/p' "$out4")
run2=$(sed -n '/(restart 1)/,$p' "$out4")
steps1=$(grep -o '[0-9]* steps/epoch' <<< "$run1" | head -n1 | cut -d' ' -f1 || true)
stop=$(grep -o 'stopped by signal [0-9]* at epoch [0-9]*, batch [0-9]*' <<< "$run1" | head -n1 || true)
stop_epoch=$(sed -n 's/.* at epoch \([0-9]*\), batch .*/\1/p' <<< "$stop")
stop_batch=$(sed -n 's/.*, batch \([0-9]*\)$/\1/p' <<< "$stop")
last4=$(tail -n1 "$ROOT/metrics/case4-$id4.jsonl" 2>/dev/null || true)
echo "case 4: run 1: ${steps1:-?} steps/epoch, ${stop:-no stop line}; checking:"
check "run 1 was 2 nodes, 2 ranks" has "$run1" '(restart 0) on n\[1-2\]: 2 nodes, 2 ranks'
check "run 1's ranks trained together over Gloo" has "$run1" 'DDP over gloo: 2 ranks'
check "run 1 checkpointed mid-epoch on the signal (0 < batch ${stop_batch:-?} < ${steps1:-?})" \
  test -n "$stop_batch" -a -n "$steps1" -a "${stop_batch:-0}" -gt 0 -a "${stop_batch:-0}" -lt "${steps1:-0}"
check "run 1 wrote $ckpt4" has "$run1" "checkpoint written to $ckpt4"
check "train.sbatch requeued the job (scontrol requeue)" has "$run1" "requeueing job $id4"
check "(a) the requeued run (restart 1) got 1 node and started 1 rank" has "$run2" '(restart 1) on n[12]: 1 nodes, 1 ranks'
check "(a) SLURM ran it on 1 node ($(job_field "$id4" NodeList), NumNodes=$(job_field "$id4" NumNodes))" test "$(job_field "$id4" NumNodes)" = 1
check "(b) it resumed from $ckpt4 mid-epoch (epoch ${stop_epoch:-?}, not at batch 0)" \
  has "$run2" "resumed from $ckpt4 at epoch ${stop_epoch:-x}, batch [1-9]"
check "(c) job COMPLETED with exit 0 ($state4, ExitCode=$(job_field "$id4" ExitCode))" \
  test "$state4" = COMPLETED -a "$(job_field "$id4" ExitCode)" = 0:0
check "(c) and finished: train.sbatch's 'finished' line" has "$run2" "finished; metrics in"
# Exactly the rest of the epoch: the dataset's records less the 2 ranks x BATCH
# x stop_batch run 1 had read, in full batches of 1 rank x BATCH (the trainer
# drops a last partial batch; the metrics count records, padding aside).
records4=$(grep -o '"records": *[0-9]*' "$DATA/manifest.json" | head -n1 | grep -o '[0-9]*$' || true)
rest4=$(( ${records4:-0} - 2 * BATCH * ${stop_batch:-0} ))
rest4=$(( rest4 / BATCH * BATCH ))
resumed_epoch4=$(grep "\"epoch\":$(( ${stop_epoch:-0} + 1 ))," "$ROOT/metrics/case4-$id4.jsonl" 2>/dev/null | tail -n1 || true)
check "(b) the resumed epoch read exactly the $rest4 records run 1 had not (of ${records4:-?})" \
  has "$resumed_epoch4" "\"records\":$rest4,"
final_epoch_on_1() { has "$1" "\"epoch\":$EPOCHS," && has "$1" '"world_size":1[,}]' && has "$1" '"nodes":1,'; }
check "(c) the final epoch's metrics: epoch $EPOCHS, world size 1, 1 node" final_epoch_on_1 "$last4"
echo "case 4: took $((SECONDS - t4)) s"

# Case 5 (issue 34): a dataset prepared by a job array, one part per task
# (slurm/prepare.sbatch via slurm/prepare.sh), and merged by a job that
# depends on the array, is the one-process pack byte for byte; an array that
# fails never runs its merge. Needs only shardkit-pack.
case_prepare_array() {
  echo "== case 5: Fashion-MNIST's test set prepared by an array of 4 parts, merged by a dependent job"
  local t5=$SECONDS dir=$WORK/prepare pack=$BUILD/tools/pack/shardkit-pack rc=0
  local fm=/usr/share/datasets/fashion-mnist
  local cmd=(shardkit-pack idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" --shard-size 1000000)
  mkdir -p "$dir"
  "${cmd[@]/#shardkit-pack/$pack}" "$dir/one" > /dev/null  # the one-process reference
  slurm/prepare.sh --parts 4 --parts-dir "$dir/parts" --out "$dir/merged" --wait \
    --sbatch "--cpus-per-task=1" -- "${cmd[@]}" > "$dir/prepare.txt" 2>&1 || rc=$?
  cat "$dir/prepare.txt" "$dir"/parts/prepare-*.out
  local array merge
  array=$(grep -o 'array job [0-9]*' "$dir/prepare.txt" | grep -o '[0-9]*$' || true)
  merge=$(grep -o 'merge job [0-9]*' "$dir/prepare.txt" | grep -o '[0-9]*$' || true)
  check "prepare.sh --wait: the merge job succeeded (exit $rc)" test "$rc" = 0
  check "the array's 4 tasks COMPLETED" test "$(scontrol show job "${array:-x}" 2>/dev/null | grep -c 'JobState=COMPLETED')" = 4
  local i parts_ok=1
  for i in 0 1 2 3; do
    grep -q "part $i of 4 (.*/part-$i/part.json)" "$dir/parts/prepare-${array:-x}_$i.out" && [ -f "$dir/parts/part-$i/part.json" ] || parts_ok=0
  done
  local nodes
  nodes=$(scontrol show job "${array:-x}" 2>/dev/null | grep -o ' NodeList=n[0-9]*' | cut -d= -f2 | sort -u | paste -sd' ' || true)
  check "task I wrote part I of 4 into parts/part-I, with part.json (on nodes: $nodes)" test $parts_ok = 1
  local last_end merge_start
  last_end=$(scontrol show job "${array:-x}" 2>/dev/null | grep -o 'EndTime=[^ ]*' | cut -d= -f2 | sort | tail -n1)
  merge_start=$(scontrol show job "${merge:-x}" 2>/dev/null | grep -o 'StartTime=[^ ]*' | cut -d= -f2)
  not_before() { [ -n "$1" ] && [ -n "$2" ] && [[ ! "$1" < "$2" ]]; }
  check "the merge job (afterok) started ($merge_start) once every part had ended ($last_end)" not_before "$merge_start" "$last_end"
  check "merge joined 4 parts (hard-linked) and verify passed" grep -q "merged 4 parts .*(.* hard-linked, 0 copied)" "$dir/parts/merge-${merge:-x}.out"
  check "shardkit-pack verify exits 0 on the merged dataset" "$pack" verify "$dir/merged"
  local same=1 n=0 f
  for f in "$dir"/one/shard-*.sks; do
    n=$((n + 1)); cmp -s "$f" "$dir/merged/$(basename "$f")" || same=0
  done
  [ "$(find "$dir/merged" -name 'shard-*.sks' | wc -l)" = "$n" ] || same=0
  check "all $n shards byte-identical to the one-process pack (cmp)" test $same = 1
  check "manifests equal but for created_at and created_by" python3 -c '
import json, sys
a, b = (json.load(open(sys.argv[i] + "/manifest.json")) for i in (1, 2))
for m in (a, b): m.pop("created_at"); m.pop("created_by")
sys.exit(a != b)' "$dir/one" "$dir/merged"
  # A failed array (4 parts of a 1-shard dataset: every task refuses) never merges.
  rc=0
  slurm/prepare.sh --parts 4 --parts-dir "$dir/bad-parts" --out "$dir/bad" --wait --sbatch "--cpus-per-task=1" \
    -- shardkit-pack idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
    > "$dir/bad.txt" 2>&1 || rc=$?
  cat "$dir/bad.txt" "$dir"/bad-parts/prepare-*_0.out
  check "a failed array: prepare.sh --wait fails (exit $rc), the merge never ran, no dataset" \
    test "$rc" != 0 -a ! -e "$dir/bad-parts/merge-$(grep -o 'merge job [0-9]*' "$dir/bad.txt" | grep -o '[0-9]*$').out" -a ! -e "$dir/bad/manifest.json"
  echo "case 5: took $((SECONDS - t5)) s"
}
case_prepare_array

# Case 6: ranks started by a bare srun, no batch script and no torchrun:
# rank, world and local rank from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, the
# port from the job id. (The emulated nodes' names n1, n2 do not resolve, so
# MASTER_ADDR names the first node's address, as on a cluster whose node names
# are not host names; where they are, nothing else is needed.)
echo "== case 6: shardkit-train ranks started by a bare srun over 2 nodes (Gloo)"
rc6=0
salloc --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 \
  srun --export=ALL,MASTER_ADDR=127.0.0.1 "$BUILD/train/shardkit-train" --data "$DATA" --arch tiny \
    --epochs 1 --max-steps 20 --batch-size 16 --workers 1 --threads 1 --backend gloo \
  > "$WORK/case6.out" 2>&1 || rc6=$?
cat "$WORK/case6.out"
check "both ranks exited 0 (exit $rc6)" test "$rc6" = 0
check "2 ranks trained together over Gloo, rank and world from srun's variables" \
  grep -q "DDP over gloo: 2 ranks (SLURM variables)" "$WORK/case6.out"

rm -rf "$ROOT/metrics/case1-$id1.jsonl" "$ROOT/metrics/case2-$id2.jsonl" "$ROOT/metrics/case4-$id4.jsonl" \
  "$ROOT/checkpoints/case1-$id1" "$ROOT/checkpoints/case2-$id2" "$ROOT/checkpoints/case4-$id4"
rmdir "$ROOT/metrics" "$ROOT/checkpoints" 2>/dev/null || true

echo "slurm: $pass passed, $fail failed"
for f in "${failed[@]}"; do echo "  FAILED: $f"; done
[ "$fail" = 0 ]
