#!/usr/bin/env bash
# The tests' S3 server: a one-node Ceph cluster (a monitor, one memstore OSD,
# pools of size 1) and radosgw's beast frontend on 127.0.0.1, with an S3 user.
# Everything (config, data, logs, sockets, pid files) lives in STATE_DIR; the
# cluster has its own name and fsid, so instances in different directories
# never meet.
#   tests/servers/rgw.sh start STATE_DIR   then: source STATE_DIR/env
#   tests/servers/rgw.sh stop STATE_DIR    stops the daemons by PID, removes STATE_DIR
# STATE_DIR/env exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_DEFAULT_REGION, for boto3),
# SHARDKIT_RGW_PIDS, and for radosgw-admin SHARDKIT_RGW_CONF and
# SHARDKIT_RGW_CLUSTER. A second gateway of the cluster at SHARDKIT_RGW_STS_URL
# has STS (GetSessionToken, AssumeRole of the role SHARDKIT_RGW_ROLE_ARN) for
# the user, and takes the temporary credentials it hands out. SHARDKIT_RGW_STORE_BYTES sets the OSD's capacity (held in
# memory as data is written; default 4 GiB).
set -euo pipefail
export SK_NAME=rgw.sh  # names the script in lib.sh's messages
# shellcheck source=tests/servers/lib.sh
source "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 start|stop STATE_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD=$1
S=$(realpath -m "$2")
CONF=$S/ceph.conf

# Every Ceph command names this cluster's config and name.
# (each call bounded: a monitor that is not up yet makes the CLI wait).
ceph_cmd() { timeout 20 ceph -c "$CONF" --cluster "$CLUSTER" --connect-timeout 15 "$@"; }
# For polls: short, so a daemon's death is noticed between them.
ceph_poll() { timeout 5 ceph -c "$CONF" --cluster "$CLUSTER" --connect-timeout 3 "$@"; }

write_conf() {  # mon_port
  cat > "$CONF" <<EOF
[global]
fsid = $FSID
mon_host = v2:127.0.0.1:$1
mon_initial_members = a
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_ipv6 = false
# No cephx (127.0.0.1 only, a throwaway cluster); "none" cannot do msgr2's
# secure mode, which radosgw asks for by default.
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
ms_mon_service_mode = crc
ms_mon_cluster_mode = crc
ms_client_mode = crc
ms_service_mode = crc
ms_cluster_mode = crc
mon_warn_on_insecure_global_id_reclaim_allowed = false
run_dir = $S/run
admin_socket = $S/run/\$name.asok
pid_file = $S/run/\$name.pid
log_file = $S/log/\$name.log
mon_cluster_log_file = $S/log/cluster.log
crash_dir = $S/crash
keyring = $S/keyring
rgw_data = $S/rgw
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
# Commit map changes at once (pool creation waits on them; the default 1 s each).
paxos_propose_interval = 0.01
paxos_min_wait = 0.001
[mon]
mon_data = $S/mon
# A taken port fails at once (the start picks another), not after 3 tries 5 s apart.
ms_bind_retry_count = 1
[client.rgw-sts]
# A second gateway of the same cluster (users, buckets) with STS
# (GetSessionToken, AssumeRole): real temporary credentials for the
# credential tests. The key encrypts session tokens (16 bytes). Not on the
# first gateway: with STS on, radosgw answers every refused signature
# AccessDenied, where S3 names it (SignatureDoesNotMatch, InvalidAccessKeyId).
rgw_s3_auth_use_sts = true
rgw_sts_key = $STS_KEY
[osd]
osd_data = $S/osd
osd_objectstore = memstore
memstore_device_bytes = $STORE_BYTES
EOF
}

# The monitor on a free port (another instance may take the port first: then
# a new port, a new monmap and a fresh store).
start_mon() {
  local port
  for _ in 1 2 3 4 5; do
    port=$(sk_free_port)
    write_conf "$port"
    rm -rf "$S/mon" "$S/monmap"
    mkdir -p "$S/mon"
    timeout 30 monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$port]" "$S/monmap" > /dev/null
    timeout 60 ceph-mon -c "$CONF" --cluster "$CLUSTER" -i a --mkfs --monmap "$S/monmap" \
      >> "$S/log/mon.out" 2>&1 || { echo "rgw.sh: ceph-mon --mkfs failed" >&2; return 1; }
    : > "$S/log/mon.a.log"
    MON_PID=$(sk_daemon "$S/log/mon.out" ceph-mon -c "$CONF" --cluster "$CLUSTER" -i a -f)
    echo "mon $MON_PID" >> "$S/pids"
    if sk_wait_for 60 "the monitor's quorum (ceph -s)" "$MON_PID" ceph_poll -s; then return 0; fi
    if sk_alive "$MON_PID" || ! sk_bind_failed "$S/log/mon.a.log"; then return 1; fi
    echo "rgw.sh: monitor port $port was taken; trying another" >&2
  done
  return 1
}

health_ok() { [ "$(ceph_poll health)" = HEALTH_OK ]; }
osd_up() { ceph_poll osd stat -f json | grep -q '"num_up_osds":1,'; }

start_osd() {
  local uuid id
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_cmd osd new "$uuid")
  [ "$id" = 0 ] || { echo "rgw.sh: 'ceph osd new' gave osd id '$id', expected 0" >&2; return 1; }
  mkdir -p "$S/osd"
  timeout 60 ceph-osd -c "$CONF" --cluster "$CLUSTER" -i 0 --mkfs --osd-uuid "$uuid" >> "$S/log/osd.out" 2>&1 ||
    { echo "rgw.sh: ceph-osd --mkfs failed" >&2; return 1; }
  OSD_PID=$(sk_daemon "$S/log/osd.out" ceph-osd -c "$CONF" --cluster "$CLUSTER" -i 0 -f)
  echo "osd $OSD_PID" >> "$S/pids"
  sk_wait_for 60 "osd.0 to be up (ceph osd stat)" "$OSD_PID" osd_up
  sk_wait_for 60 "HEALTH_OK (ceph health)" "$OSD_PID" health_ok
}

# A signed S3 request (ListBuckets) through boto3 with the user's keys.
s3_answers() {
  /usr/bin/python3 - "$1" "$ACCESS_KEY" "$SECRET_KEY" <<'PY'
import sys, boto3
from botocore.config import Config
url, key, secret = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                  region_name="default", config=Config(s3={"addressing_style": "path"},
                  retries={"max_attempts": 1}, connect_timeout=5, read_timeout=20))
s3.list_buckets()
PY
}

# STS for the user: the IAM caps and a user policy that allow
# GetSessionToken and AssumeRole, and a role it may assume (s3:* on every
# bucket): real temporary credentials for the credential tests.
setup_sts() {
  local admin=(timeout 120 radosgw-admin -c "$CONF" --cluster "$CLUSTER")
  "${admin[@]}" caps add --uid=shardkit --caps="user-policy=*;roles=*" > /dev/null 2>> "$S/log/radosgw-admin.out"
  "${admin[@]}" role create --role-name=shardkit-reader --path=/ --assume-role-policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/shardkit"]},"Action":["sts:AssumeRole"]}]}' \
    > /dev/null 2>> "$S/log/radosgw-admin.out"
  "${admin[@]}" role-policy put --role-name=shardkit-reader --policy-name=s3 --policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":"arn:aws:s3:::*"}]}' \
    > /dev/null 2>> "$S/log/radosgw-admin.out"
  /usr/bin/python3 - "http://127.0.0.1:$STS_PORT" "$ACCESS_KEY" "$SECRET_KEY" <<'PY'
import json, sys, boto3
url, key, secret = sys.argv[1:4]
iam = boto3.client("iam", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                   region_name="default")
iam.put_user_policy(UserName="shardkit", PolicyName="sts", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*",
     "Action": ["sts:GetSessionToken", "sts:AssumeRole"]}]}))
PY
}

# radosgw (client NAME) on a free port, started after the user exists
# (radosgw-admin makes the default realm, zonegroup and zone, then radosgw
# finds them); its port and pid in RGW_PORT and RGW_PID.
# tcp_nodelay: beast's default leaves Nagle on, and a small response's body,
# written after its headers, then waits for the client's delayed ACK (40 ms
# per manifest GET here); S3 services do not.
start_rgw() {  # NAME
  local name=$1
  for _ in 1 2 3 4 5; do
    RGW_PORT=$(sk_free_port)
    : > "$S/log/client.$name.log"
    RGW_PID=$(sk_daemon "$S/log/$name.out" radosgw -c "$CONF" --cluster "$CLUSTER" -n "client.$name" -f \
      --rgw_frontends "beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1")
    echo "$name $RGW_PID" >> "$S/pids"
    if sk_wait_for 60 "radosgw to listen on 127.0.0.1:$RGW_PORT" "$RGW_PID" sk_listens "$RGW_PID" "$RGW_PORT"; then
      sk_wait_for 60 "an S3 request (ListBuckets) to succeed" "$RGW_PID" s3_answers "http://127.0.0.1:$RGW_PORT" ||
        { s3_answers "http://127.0.0.1:$RGW_PORT" >&2 || true; return 1; }
      return 0
    fi
    sk_alive "$RGW_PID" && return 1
    sk_bind_failed "$S/log/client.$name.log" || return 1
    echo "rgw.sh: radosgw port $RGW_PORT was taken; trying another" >&2
  done
  return 1
}

# Last started, first stopped: radosgw and the OSD tell the monitor they are
# going (all at once, the OSD waits 5 s for a monitor that is gone and
# radosgw 2 minutes).
stop() {
  local p
  if [ -f "$S/pids" ]; then
    for p in $(awk '{print $2}' "$S/pids" | tac); do sk_stop_pids "$CONF" "$p"; done
  fi
  sk_remove_state_dir "$S" rgw
}

on_start_failure() {
  local f
  echo "rgw.sh: start failed; the daemons' last errors:" >&2
  for f in "$S"/log/*.log "$S"/log/*.out; do
    [ -s "$f" ] && grep -E ' -1 |ERROR|[Ee]rror:' "$f" | tail -n 5 | sed "s|^|  ${f##*/}: |" >&2
  done
  stop
}

start() {
  local t0=$SECONDS c
  for c in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool; do
    command -v $c > /dev/null || {
      echo "rgw.sh: $c not found; install radosgw ceph-mon ceph-osd (scripts/deps.sh)" >&2
      exit 1
    }
  done
  /usr/bin/python3 -c 'import boto3' 2> /dev/null || {
    echo "rgw.sh: /usr/bin/python3 has no boto3; install python3-boto3 (scripts/deps.sh)" >&2
    exit 1
  }
  STORE_BYTES=${SHARDKIT_RGW_STORE_BYTES:-4294967296}
  [[ "$STORE_BYTES" =~ ^[1-9][0-9]*$ ]] ||
    { echo "rgw.sh: SHARDKIT_RGW_STORE_BYTES must be a number of bytes, not '$STORE_BYTES'" >&2; exit 2; }
  stop  # whatever an earlier run left in this directory
  sk_claim_state_dir "$S" rgw
  mkdir -p "$S"/{run,log,crash,rgw}
  FSID=$(cat /proc/sys/kernel/random/uuid)
  CLUSTER=sk${FSID:0:8}
  STS_KEY=$(tr -dc 'a-z0-9' < /dev/urandom | head -c 16 || true)
  echo "$CLUSTER" > "$S/cluster"
  trap on_start_failure EXIT
  start_mon
  start_osd
  ACCESS_KEY=$(tr -dc 'A-Z0-9' < /dev/urandom | head -c 20 || true)
  SECRET_KEY=$(tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 40 || true)
  timeout 120 radosgw-admin -c "$CONF" --cluster "$CLUSTER" user create --uid=shardkit --display-name=shardkit \
    --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" > "$S/log/user.json" 2>> "$S/log/radosgw-admin.out" ||
    { echo "rgw.sh: radosgw-admin user create failed" >&2; exit 1; }
  start_rgw rgw-sts
  STS_PORT=$RGW_PORT STS_PID=$RGW_PID
  setup_sts || { echo "rgw.sh: setting up STS (caps, user policy, role) failed" >&2; exit 1; }
  start_rgw rgw
  cat > "$S/env.tmp" <<EOF
export AWS_ENDPOINT_URL=http://127.0.0.1:$RGW_PORT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_REGION=default
export AWS_DEFAULT_REGION=default
export SHARDKIT_RGW_PIDS="$MON_PID $OSD_PID $STS_PID $RGW_PID"
export SHARDKIT_RGW_STS_URL=http://127.0.0.1:$STS_PORT
export SHARDKIT_RGW_CONF=$CONF
export SHARDKIT_RGW_CLUSTER=$CLUSTER
export SHARDKIT_RGW_ROLE_ARN=arn:aws:iam:::role/shardkit-reader
EOF
  mv "$S/env.tmp" "$S/env"
  trap - EXIT
  echo "rgw.sh: radosgw at http://127.0.0.1:$RGW_PORT (cluster $CLUSTER, pids $MON_PID $OSD_PID $RGW_PID)" \
    "up in $((SECONDS - t0)) s; source $S/env"
}

case "$CMD" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
