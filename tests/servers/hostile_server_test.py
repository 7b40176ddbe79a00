"""Replies no real server gives but a broken one, a middlebox or an attacker
can: each ends as one line naming the object, exit 2, with nothing written
that looks complete, never as bytes that were not the object's (a 204 to a
Range request is not an empty read) and never as a read that goes on for
hours (a reply that breaks HTTP is not retried; a server that resets every
reply after a few bytes, or trickles them, is given up within the retry
budget). The server is Python's, in this process, serving a dataset packed
here, on 127.0.0.1; it counts the requests it sees.

Runs with Debian's /usr/bin/python3; tools from SHARDKIT_BUILD."""
import base64
import contextlib
import hashlib
import http.server
import json
import os
import re
import socket
import struct
import threading
import time
import urllib.parse

import pytest

from readers import FASHION, HERE, PACK, run


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "ok"
    root = None
    requests = {}

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.serve(False)

    def do_GET(self):
        self.serve(True)

    def serve(self, body):
        name = urllib.parse.unquote(self.path.lstrip("/"))
        if Handler.mode == "auth" and self.headers.get("Authorization") != "Basic " + \
                base64.b64encode(b"reader:p@ss w0rd").decode():
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        Handler.requests[(self.command, name)] = Handler.requests.get((self.command, name), 0) + 1
        path = os.path.join(Handler.root, name)
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = open(path, "rb").read()
        if body and name.endswith("manifest.json") and Handler.mode == "manswitch" and \
                Handler.requests[(self.command, name)] > 1:  # replaced after its first GET
            data = re.sub(rb'"crc32c": "[0-9a-f]+"', b'"crc32c": "deadbeef"', data)
        if body and name.endswith(".sks") and Handler.mode == "flip":  # damaged in transit
            data = data[:5000] + bytes([data[5000] ^ 1]) + data[5001:]
        m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        a, b = (int(m[1]), min(int(m[2]), len(data) - 1)) if m else (0, len(data) - 1)
        hostile = body and name.endswith(".sks") and Handler.mode not in ("ok", "auth")
        if hostile and Handler.mode == "errorflood":  # a 500 whose body never ends
            self.send_response(500)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"<Error>" + b"x" * 65536)
            except OSError:
                self.close_connection = True
            return
        if hostile and Handler.mode in ("204", "202"):
            self.send_response(int(Handler.mode))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if hostile and Handler.mode == "garbage":
            self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
            self.close_connection = True
            return
        self.send_response(206 if m else 200)
        self.send_header("ETag", '"v1-%d"' % len(data))
        if m:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        self.send_header("Content-Length", str(b - a + 1 if body else len(data)))
        self.end_headers()
        if not body:
            return
        if hostile and Handler.mode == "reset10":  # ten bytes, then a reset, every time
            self.wfile.write(data[a:a + 10])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if hostile and Handler.mode == "trickle":  # a byte every 0.2 s
            for i in range(a, b + 1):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(0.2)
            return
        self.wfile.write(data[a:b + 1])


@contextlib.contextmanager
def serving(mode):
    """The server misbehaves as `mode` says inside the block (its request
    counts starting from zero), and is well again after it."""
    Handler.requests.clear()
    Handler.mode = mode
    try:
        yield
    finally:
        Handler.mode = "ok"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    run([PACK, "idx", "--images", FASHION / "t10k-images-idx3-ubyte.gz", "--labels",
         FASHION / "t10k-labels-idx1-ubyte.gz", root / "ds"], os.environ)
    Handler.root = str(root)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/ds" % httpd.server_address[1], root
    httpd.shutdown()
    httpd.server_close()


def get(url, out, **env):
    e = dict(os.environ, SHARDKIT_RETRY_SECONDS="3", SHARDKIT_STALL_SECONDS="2")
    e.update(env)
    r = run([PACK, "get", url + "/shard-00000.sks", out], e, check=False)
    return r.returncode, r.stderr


@pytest.mark.parametrize("status", ["204", "202"])
def test_a_2xx_that_is_not_206_to_a_range_is_an_error_not_an_empty_read(server, tmp_path, status):
    url, _ = server
    with serving(status):
        code, err = get(url, tmp_path / "out.sks")
    assert code == 2, err
    assert "shard-00000.sks: HTTP %s to a Range request" % status in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.sks").exists(), "a failed get leaves no file"
    # verify: a shard it could not read is unchecked (exit 2), not bad data (exit 1)
    with serving(status):
        r = run([PACK, "verify", url], dict(os.environ, SHARDKIT_RETRY_SECONDS="3"), check=False)
    assert r.returncode == 2 and "UNCHECKED" in r.stdout and "not checked: a read failed" in r.stderr, \
        (r.stdout, r.stderr)
    code, err = get(url, tmp_path / "good.sks")  # the same server, well again: the shard
    assert code == 0, err
    assert (tmp_path / "good.sks").read_bytes() == (server[1] / "ds" / "shard-00000.sks").read_bytes()


def test_a_reply_that_breaks_http_is_not_retried(server, tmp_path):
    url, _ = server
    with serving("garbage"):
        code, err = get(url, tmp_path / "out.sks", SHARDKIT_RETRY_SECONDS="600")
    assert code == 2 and "shard-00000.sks" in err, err
    assert "gave up" not in err, "failed at once, not after retries: " + err
    assert Handler.requests.get(("GET", "ds/shard-00000.sks")) == 1, Handler.requests


@pytest.mark.parametrize("mode", ["reset10", "trickle"])
def test_a_server_that_brings_a_few_bytes_every_try_is_given_up(server, tmp_path, mode):
    """Each try brings bytes, so a budget that starts again on any progress
    would never run out (reset10: 1.2 MB ten bytes a try; trickle: five bytes
    a second, under curl's stall rate): the retry budget holds."""
    url, _ = server
    with serving(mode):
        code, err = get(url, tmp_path / "out.sks")
    assert code == 2 and "shard-00000.sks" in err and "gave up after" in err, err
    assert not (tmp_path / "out.sks").exists()
    assert Handler.requests.get(("GET", "ds/shard-00000.sks"), 0) >= 2, "it was retried"


def test_stage_installs_the_manifest_it_checked_the_shards_against(server, tmp_path):
    """A manifest replaced at the source while a node stages (a push --force):
    stage.sh lists the shards from the copy it fetched, checks them against
    it and installs that copy, so the staged dataset verifies."""
    url, root = server
    with serving("manswitch"):
        r = run([HERE.parent.parent / "slurm" / "stage.sh", url, tmp_path / "staged"],
                dict(os.environ, SHARDKIT_PACK=str(PACK)), check=False)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "staged" / "manifest.json").read_bytes() == (root / "ds" / "manifest.json").read_bytes()
    assert run([PACK, "verify", tmp_path / "staged"], os.environ, check=False).returncode == 0
    assert Handler.requests[("GET", "ds/manifest.json")] == 1, "fetched once"
    assert not [p for p in os.listdir(tmp_path / "staged") if "staging" in p]


def test_get_of_a_shard_checks_it_against_the_manifest(server, tmp_path):
    """`get` of a shard the dataset's manifest names: a byte damaged on the
    way is an error (nothing kept), not a copy that exits 0."""
    url, root = server
    with serving("flip"):
        code, err = get(url, tmp_path / "out.sks")
    assert code == 2 and "shard-00000.sks" in err and "the manifest says" in err, err
    assert not (tmp_path / "out.sks").exists()


def test_an_error_reply_whose_body_never_ends_is_cut_short(server, tmp_path):
    url, _ = server
    with serving("errorflood"):
        code, err = get(url, tmp_path / "out.sks")
    assert code == 2 and "HTTP 500" in err and "gave up after" in err, err


def test_a_password_in_a_url_is_sent_but_never_shown(server, tmp_path):
    url, _ = server
    authed = url.replace("http://", "http://reader:p%40ss%20w0rd@")
    with serving("auth"):
        r = run([PACK, "verify", authed], os.environ, check=False)
        assert r.returncode == 0, r.stderr
        wrong = url.replace("http://", "http://reader:wrong-secret@")
        r = run([PACK, "inspect", wrong], os.environ, check=False)
    assert r.returncode == 2 and "HTTP 401" in r.stderr, r.stderr
    assert "wrong-secret" not in r.stderr and "http://reader@127.0.0.1" in r.stderr, r.stderr


def test_shard_names_are_percent_encoded_as_a_url_path(server, tmp_path):
    url, root = server
    odd = root / "odd"
    odd.mkdir(exist_ok=True)
    manifest = (root / "ds" / "manifest.json").read_text()
    for i, f in enumerate(sorted((root / "ds").glob("shard-*.sks"))):
        name = f"shard {i}#?%.sks"
        (odd / name).write_bytes(f.read_bytes())
        manifest = manifest.replace(f'"{f.name}"', json.dumps(name))
    (odd / "manifest.json").write_text(manifest)
    r = run([PACK, "verify", url.removesuffix("/ds") + "/odd"], os.environ, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


class S3Loop(http.server.BaseHTTPRequestHandler):
    """Just enough of S3 for a push, whose listing repeats its continuation token."""
    protocol_version = "HTTP/1.1"
    objects = {}

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        key = urllib.parse.urlsplit(self.path).path
        if key in S3Loop.objects:
            return self.reply(200, b"", [("ETag", '"x"')])
        self.reply(404)

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        if "uploads" in q:
            return self.reply(200, b"<ListMultipartUploadsResult><IsTruncated>false"
                                   b"</IsTruncated></ListMultipartUploadsResult>")
        if "list-type" in q:
            return self.reply(200, b"<ListBucketResult><IsTruncated>true</IsTruncated>"
                                   b"<NextContinuationToken>same</NextContinuationToken>"
                                   b"</ListBucketResult>")
        self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        S3Loop.objects[urllib.parse.urlsplit(self.path).path] = body
        self.reply(200, b"", [("ETag", '"%s"' % hashlib.md5(body).hexdigest())])


def test_a_listing_that_repeats_its_continuation_token_ends(server, tmp_path):
    _, root = server
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), S3Loop)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % httpd.server_address[1],
                   AWS_ACCESS_KEY_ID="a", AWS_SECRET_ACCESS_KEY="b", AWS_REGION="us-east-1",
                   SHARDKIT_RETRY_SECONDS="3")
        r = run([PACK, "push", root / "ds", "s3://bucket/ds"], env, check=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode == 2 and "repeats its continuation token" in r.stderr, r.stderr
