# shellcheck shell=bash
# Sourced by rgw.sh and nginx.sh: what starting and stopping a test server
# shares. Free ports, bounded waits on a state, a state directory that is
# ours before anything in it is removed, and daemons stopped by PID.

# A port nothing listens on, outside the ranges others pick from: above the
# kernel's ephemeral range when there is room (an outgoing connection never
# holds it), else 12000-19999 (the training tests take 20000-31999). Two
# servers starting at once may still draw the same port: the one whose daemon
# fails to bind retries with another (sk_retry_on_bind_error).
sk_free_port() {
  local lo=12000 hi=19999 eph_hi p
  eph_hi=$(awk '{print $2}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 60999)
  if [ "$eph_hi" -le 64535 ]; then lo=$((eph_hi + 1)) hi=65535; fi
  for _ in $(seq 1 200); do
    p=$((lo + SRANDOM % (hi - lo + 1)))
    sk_port_listening "$p" || { echo "$p"; return 0; }
  done
  echo "no free port found in $lo-$hi" >&2
  return 1
}

# True when a socket listens on PORT (any address), from /proc/net/tcp{,6}.
sk_port_listening() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# True when PID itself holds a socket listening on PORT (not merely someone:
# a port taken by another program must not pass for our daemon's).
sk_listens() {  # pid port
  local hex inode
  hex=$(printf ':%04X' "$2")
  for inode in $(awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }'     /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    find "/proc/$1/fd" -lname "socket:\[$inode\]" 2>/dev/null | grep -q . && return 0
  done
  return 1
}

# True when PID is a live process (a zombie counts as gone).
sk_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# sk_wait_for SECONDS WHAT PID COMMAND...: polls COMMAND (10 times a second)
# until it succeeds; fails saying why when SECONDS pass or PID (0: none) dies.
sk_wait_for() {
  local limit=$1 what=$2 pid=$3
  shift 3
  local end=$((SECONDS + limit))
  until "$@" > /dev/null 2>&1; do
    if [ "$pid" != 0 ] && ! sk_alive "$pid"; then
      echo "$SK_NAME: process $pid exited while waiting for $what" >&2
      return 1
    fi
    if [ $SECONDS -ge $end ]; then
      echo "$SK_NAME: timed out after ${limit}s waiting for $what" >&2
      return 1
    fi
    sleep 0.1
  done
}

# The state directory's marker: a directory is only filled, and only ever
# emptied, when it is new or carries this server's marker.
sk_claim_state_dir() {  # dir kind
  local dir=$1 kind=$2
  if [ -e "$dir" ] && [ ! -f "$dir/.shardkit-$kind" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    echo "$SK_NAME: $dir exists and is not a $kind state directory; refusing to use it" >&2
    return 1
  fi
  mkdir -p "$dir"
  touch "$dir/.shardkit-$kind"
}

sk_remove_state_dir() {  # dir kind
  [ -f "$1/.shardkit-$2" ] || return 0
  rm -rf "$1"
}

# sk_stop_pids MATCH PID...: TERM to each PID whose command line contains
# MATCH (a PID reused by another program is left alone), KILL to those still
# alive after 15 s, then waits until they are gone (bounded).
sk_stop_pids() {
  local match=$1 p ours=()
  shift
  for p in "$@"; do
    if [ -z "$p" ] || ! sk_alive "$p"; then continue; fi
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$match"; then ours+=("$p"); fi
  done
  [ ${#ours[@]} -gt 0 ] || return 0
  kill -TERM "${ours[@]}" 2>/dev/null || true
  local end=$((SECONDS + 15)) left
  while :; do
    left=()
    for p in "${ours[@]}"; do sk_alive "$p" && left+=("$p"); done
    [ ${#left[@]} -gt 0 ] || return 0
    [ $SECONDS -lt $end ] || break
    sleep 0.1
  done
  echo "$SK_NAME: killing ${left[*]} (still running 15 s after SIGTERM)" >&2
  kill -KILL "${left[@]}" 2>/dev/null || true
  end=$((SECONDS + 10))
  for p in "${left[@]}"; do
    while sk_alive "$p" && [ $SECONDS -lt $end ]; do sleep 0.1; done
  done
}

# sk_daemon LOG COMMAND...: starts COMMAND in a session of its own (so a
# test runner's process-group kill or closed terminal does not reach it),
# stdio on LOG, and prints its PID.
sk_daemon() {
  local log=$1
  shift
  setsid "$@" < /dev/null >> "$log" 2>&1 &
  echo $!
}

# True when LOG says a bind failed because the address was taken.
sk_bind_failed() {
  grep -qiE 'address already in use|EADDRINUSE|\(98\)' "$1" 2>/dev/null
}
