# Sourced by the SLURM integration test: a real SLURM on this host, munged,
# one slurmctld and two slurmd daemons (-N n1, -N n2) acting as two nodes,
# each slurmd on its own port. Needs root and slurm-wlm + munge.
#   cluster_start WORKDIR   (exports SLURM_CONF)
#   cluster_stop            (stops whatever was started; safe to call twice)

cluster_start() {
  CLUSTER_DIR=$1
  mkdir -p "$CLUSTER_DIR"/{state,spool-n1,spool-n2,log}
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  # munge: a key, then the daemon (as root it needs --force).
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  CLUSTER_MUNGED=""
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    rm -f /run/munge/munged.pid  # a stale one from an earlier run would be taken for ours
    if id munge >/dev/null 2>&1; then
      runuser -u munge -- /usr/sbin/munged || /usr/sbin/munged --force
    else
      /usr/sbin/munged --force
    fi
    sleep 1
    CLUSTER_MUNGED=$(cat /run/munge/munged.pid 2>/dev/null || true)  # ours: cluster_stop stops it
  fi
  munge -n | unmunge > /dev/null || { echo "cluster: munge is not working" >&2; return 1; }
  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  cat > "$SLURM_CONF" <<CONF
ClusterName=shardkit-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$CLUSTER_DIR/state
SlurmdSpoolDir=$CLUSTER_DIR/spool-%n
SlurmctldPidFile=$CLUSTER_DIR/slurmctld.pid
SlurmdPidFile=$CLUSTER_DIR/slurmd-%n.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$CLUSTER_DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
JobRequeue=1
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=16821 CPUs=$cpus RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=16822 CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  /usr/sbin/slurmctld -f "$SLURM_CONF" -i
  /usr/sbin/slurmd -f "$SLURM_CONF" -N n1
  /usr/sbin/slurmd -f "$SLURM_CONF" -N n2
  local i
  for i in $(seq 1 300); do
    if [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -c idle)" = 2 ]; then
      echo "cluster: slurmctld and 2 slurmd (n1, n2) up"
      return 0
    fi
    sleep 1
  done
  echo "cluster: nodes did not come up" >&2
  sinfo -N >&2 || true
  tail -n 20 "$CLUSTER_DIR"/log/*.log >&2 || true
  return 1
}

cluster_stop() {
  [ -n "${CLUSTER_DIR:-}" ] || return 0
  scancel --quiet --user=root 2>/dev/null || true
  local f
  for f in "$CLUSTER_DIR"/slurmd-n1.pid "$CLUSTER_DIR"/slurmd-n2.pid "$CLUSTER_DIR"/slurmctld.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 1
  for f in "$CLUSTER_DIR"/slurmd-n1.pid "$CLUSTER_DIR"/slurmd-n2.pid "$CLUSTER_DIR"/slurmctld.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  # Step daemons of this cluster only (by pid: each has our SLURM_CONF in its
  # environment, inherited from our slurmd), never another cluster's.
  local p
  for p in $(pgrep -x slurmstepd || true); do
    if { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CLUSTER_DIR/slurm.conf"; then
      kill -9 "$p" 2>/dev/null || true
    fi
  done
  if [ -n "${CLUSTER_MUNGED:-}" ]; then kill "$CLUSTER_MUNGED" 2>/dev/null || true; fi
  CLUSTER_MUNGED=""
  CLUSTER_DIR=""
}
