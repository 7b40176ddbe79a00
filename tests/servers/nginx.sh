#!/usr/bin/env bash
# The tests' HTTP(S) server: nginx with a config of its own serving DOC_ROOT
# read-only (GET and HEAD; ranges, ETag, Last-Modified) over HTTP and HTTPS on
# free 127.0.0.1 ports, with a self-signed certificate for 127.0.0.1 and
# localhost. Config, certificate, pid, logs and temp files live in STATE_DIR.
#   tests/servers/nginx.sh start STATE_DIR DOC_ROOT   then: source STATE_DIR/env
#   tests/servers/nginx.sh stop STATE_DIR             stops nginx by PID, removes STATE_DIR
# STATE_DIR/env exports SHARDKIT_TEST_HTTP_URL, SHARDKIT_TEST_HTTPS_URL (no
# trailing slash), SHARDKIT_TEST_CA_CERT (the certificate, for verifying
# clients) and SHARDKIT_NGINX_PID (the master; its workers are its children).
set -euo pipefail
export SK_NAME=nginx.sh  # names the script in lib.sh's messages
# shellcheck source=tests/servers/lib.sh
source "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 start STATE_DIR DOC_ROOT | stop STATE_DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
CMD=$1
S=$(realpath -m "$2")

make_cert() {
  timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$S/key.pem" -out "$S/cert.pem" > "$S/log/openssl.out" 2>&1 ||
    { cat "$S/log/openssl.out" >&2; echo "nginx.sh: openssl could not make a certificate" >&2; return 1; }
}

write_conf() {  # http_port https_port
  # As root, workers would run as nobody, who may not read DOC_ROOT: run them
  # as whoever starts the server.
  local user=""
  [ "$(id -u)" != 0 ] || user="user root root;"
  cat > "$S/nginx.conf" <<EOF
$user
worker_processes 2;
daemon off;
pid $S/nginx.pid;
error_log $S/log/error.log warn;
events { worker_connections 4096; }
http {
  default_type application/octet-stream;
  access_log $S/log/access.log;
  client_body_temp_path $S/tmp/body;
  proxy_temp_path $S/tmp/proxy;
  fastcgi_temp_path $S/tmp/fastcgi;
  uwsgi_temp_path $S/tmp/uwsgi;
  scgi_temp_path $S/tmp/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 300s;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$1;
    listen 127.0.0.1:$2 ssl;
    ssl_certificate $S/cert.pem;
    ssl_certificate_key $S/key.pem;
    root $DOC_ROOT;
    location / {
      limit_except GET { deny all; }
    }
  }
}
EOF
}

http_answers() {  # url: any HTTP status counts (DOC_ROOT may be empty)
  /usr/bin/python3 - "$1" "$S/cert.pem" <<'PY'
import sys, ssl, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/", timeout=10, context=ssl.create_default_context(cafile=sys.argv[2]))
except urllib.error.HTTPError:
    pass
PY
}

both_listening() { sk_listens "$1" "$2" && sk_listens "$1" "$3"; }

# The master and its workers (children of the master).
nginx_pids() {
  local m=$1 p
  echo "$m"
  for p in /proc/[0-9]*; do
    [ "$(awk '{print $4}' "$p/stat" 2>/dev/null)" = "$m" ] && echo "${p#/proc/}"
  done
  return 0
}

stop() {
  if [ -f "$S/master.pid" ]; then
    # shellcheck disable=SC2046  # one PID a word
    sk_stop_pids "$S/nginx.conf" $(nginx_pids "$(cat "$S/master.pid")")
  fi
  sk_remove_state_dir "$S" nginx
}

start() {
  [ $# -eq 3 ] || usage
  DOC_ROOT=$(realpath -m "$3")
  [ -d "$DOC_ROOT" ] || { echo "nginx.sh: DOC_ROOT $DOC_ROOT is not a directory" >&2; exit 1; }
  command -v nginx > /dev/null || { echo "nginx.sh: nginx not found; install nginx-light (scripts/deps.sh)" >&2; exit 1; }
  command -v openssl > /dev/null || { echo "nginx.sh: openssl not found; install openssl (scripts/deps.sh)" >&2; exit 1; }
  stop
  sk_claim_state_dir "$S" nginx
  mkdir -p "$S"/{log,tmp}
  trap 'echo "nginx.sh: start failed; error log:" >&2; tail -n 20 "$S/log/error.log" >&2 2>/dev/null; stop' EXIT
  make_cert
  local http https pid
  for _ in 1 2 3 4 5; do
    http=$(sk_free_port)
    https=$(sk_free_port)
    [ "$http" != "$https" ] || continue
    write_conf "$http" "$https"
    : > "$S/log/error.log"
    pid=$(sk_daemon "$S/log/nginx.out" nginx -p "$S" -c "$S/nginx.conf" -e "$S/log/error.log")
    echo "$pid" > "$S/master.pid"
    if sk_wait_for 30 "nginx to listen on 127.0.0.1:$http and :$https" "$pid" both_listening "$pid" "$http" "$https"; then
      break
    fi
    sk_alive "$pid" && exit 1
    sk_bind_failed "$S/log/error.log" || exit 1
    echo "nginx.sh: port $http or $https was taken; trying another" >&2
    pid=""
  done
  [ -n "$pid" ] || exit 1
  sk_wait_for 30 "an HTTP answer on :$http" "$pid" http_answers "http://127.0.0.1:$http"
  sk_wait_for 30 "an HTTPS answer on :$https (verified with $S/cert.pem)" "$pid" http_answers "https://127.0.0.1:$https"
  cat > "$S/env.tmp" <<EOF
export SHARDKIT_TEST_HTTP_URL=http://127.0.0.1:$http
export SHARDKIT_TEST_HTTPS_URL=https://127.0.0.1:$https
export SHARDKIT_TEST_CA_CERT=$S/cert.pem
export SHARDKIT_NGINX_PID=$pid
EOF
  mv "$S/env.tmp" "$S/env"
  trap - EXIT
  echo "nginx.sh: serving $DOC_ROOT at http://127.0.0.1:$http and https://127.0.0.1:$https (pid $pid); source $S/env"
}

case "$CMD" in
  start) start "$@" ;;
  stop) stop ;;
  *) usage ;;
esac
