"""fault_proxy as plain clients see it (http.client, raw sockets, boto3) in
front of the real nginx and radosgw: bytes and signatures pass unchanged over
kept-alive connections, each fault shows up as it would from a real server
or network, the RNG is seeded, and nothing a client sends, nor a dead
upstream, stops the proxy."""
import http.client
import os
import random
import socket
import threading
import time
import uuid

import botocore.exceptions
import pytest

BODY_BYTES = 200000


@pytest.fixture(scope="module")
def data(www):
    data = os.urandom(BODY_BYTES)
    (www / "fault_proxy_test.bin").write_bytes(data)
    return data


@pytest.fixture
def web(nginx, start_proxy):
    """(proxy in front of nginx, a connection factory)."""
    proxy = start_proxy(nginx["SHARDKIT_TEST_HTTP_URL"].removeprefix("http://"), "--seed", 7)
    return proxy, lambda: http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)


def get(conn, path="/fault_proxy_test.bin", headers=None, method="GET"):
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    return r, r.read()


def test_forwards_bytes_over_kept_alive_connections(web, data):
    proxy, connect = web
    conn = connect()
    for start in (0, 1000, BODY_BYTES - 10):
        r, body = get(conn, headers={"Range": f"bytes={start}-{start + 9}"})
        assert r.status == 206 and body == data[start:start + 10]
        assert r.getheader("Content-Range") == f"bytes {start}-{start + 9}/{BODY_BYTES}"
        assert r.getheader("ETag") and r.getheader("Last-Modified")
    r, body = get(conn)
    assert r.status == 200 and body == data
    r, body = get(conn, method="HEAD")
    assert r.status == 200 and body == b"" and r.getheader("Content-Length") == str(BODY_BYTES)
    r, _ = get(conn, "/no-such-file")
    assert r.status == 404
    s = proxy.stats()
    assert s["requests"] == 6 and s["forwarded"] == 6
    assert proxy.data_connections(s) == 1 and s["upstream_connections_total"] == 1
    assert s["upstream_connections_open"] == 1 and s["client_connections_open"] >= 1


@pytest.mark.parametrize("fault,status,code", [
    ("p503", 503, b"<Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"),
    ("p429", 429, b"<Code>TooManyRequests</Code>"),
    ("p500", 500, b"<Code>InternalError</Code>"),
])
def test_error_answers_keep_the_connection(web, data, fault, status, code):
    proxy, connect = web
    proxy.set(**{fault: 1})
    conn = connect()
    r, body = get(conn)
    assert r.status == status and code in body
    assert r.getheader("Content-Type") == "application/xml"
    proxy.set(**{fault: 0})
    r, body = get(conn)  # the same connection serves the next request
    assert r.status == 200 and body == data
    s = proxy.stats()
    assert s[fault[1:]] == 1 and s["forwarded"] == 1 and proxy.data_connections(s) == 1


def test_reset_mid_body_is_a_connection_reset(web):
    proxy, connect = web
    proxy.set(reset=1)
    conn = connect()
    # The RST may discard what the client had not read yet, headers included.
    with pytest.raises(ConnectionResetError):
        get(conn)
    assert proxy.stats()["reset"] == 1


def test_cut_short_body_ends_early_with_a_normal_close(web, data):
    proxy, connect = web
    proxy.set(cut=1, cut_fraction=0.25)
    conn = connect()
    conn.request("GET", "/fault_proxy_test.bin")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Length") == str(BODY_BYTES)
    with pytest.raises(http.client.IncompleteRead) as e:
        r.read()
    assert e.value.partial == data[:BODY_BYTES // 4]
    # A HEAD answer has no body to cut: the answer itself is dropped.
    with pytest.raises(http.client.RemoteDisconnected):
        get(connect(), method="HEAD")
    assert proxy.stats()["cut"] == 2


def test_stall_sends_headers_then_nothing_until_the_client_gives_up(web, data):
    proxy, connect = web
    proxy.set(stall=1)
    conn = connect()
    conn.timeout = 1
    conn.request("GET", "/fault_proxy_test.bin")
    r = conn.getresponse()  # the headers arrive
    assert r.status == 200
    with pytest.raises(socket.timeout):
        r.read()
    conn.close()
    proxy.set(stall=0)
    _, body = get(connect())
    assert body == data and proxy.stats()["stall"] == 1


def test_slow_trickles_the_whole_body(web, data):
    proxy, connect = web
    proxy.set(slow=1, slow_bps=4000)  # 400 bytes each 100 ms
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.sendall(b"GET /fault_proxy_test.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1999\r\n\r\n")
        received, pieces = b"", 0
        while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < 2000:
            chunk = s.recv(65536)
            assert chunk, "connection closed early"
            received += chunk
            pieces += 1
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 206") and body == data[:2000]
    assert pieces >= 3  # not in one piece: 5 sends 100 ms apart
    assert proxy.stats()["slow"] == 1


def test_latency_is_added_before_forwarding(web):
    proxy, connect = web
    proxy.set(latency_ms=300)
    conn = connect()
    t0 = time.monotonic()
    r, _ = get(conn, headers={"Range": "bytes=0-0"})
    assert r.status == 206 and time.monotonic() - t0 >= 0.3  # a lower bound: it cannot be faster
    assert proxy.stats()["latency"] == 1


def test_next_and_match_choose_which_requests_fail(web, data):
    proxy, connect = web
    proxy.set(next=503, next_count=2)
    conn = connect()
    assert [get(conn)[0].status for _ in range(3)] == [503, 503, 200]
    proxy.set(p503=1, match="fault_proxy_test")
    assert get(conn)[0].status == 503
    assert get(conn, "/no-such-file")[0].status == 404  # not matched: forwarded
    bad = connect()
    bad.request("GET", "/__fault__/set?p503=2")
    r = bad.getresponse()
    assert r.status == 400 and b"probability" in r.read()
    bad.request("GET", "/__fault__/set?nonsense=1")
    r = bad.getresponse()
    assert r.status == 400 and b"unknown knob" in r.read()
    bad.request("GET", "/__fault__/set?p503=0&reset=0.6&cut=0.6")
    r = bad.getresponse()
    assert r.status == 400 and b"add up to" in r.read()
    assert proxy.control("config")["p503"] == 1  # a refused set changes nothing


def statuses(proxy, n=40):
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    return [get(conn, headers={"Range": "bytes=0-0"})[0].status for _ in range(n)]


def test_the_seed_decides_the_sequence(nginx, start_proxy, data):
    upstream = nginx["SHARDKIT_TEST_HTTP_URL"].removeprefix("http://")
    a, b, c = (start_proxy(upstream, "--seed", s, "--p503", 0.5) for s in (11, 11, 12))
    sa = statuses(a)
    assert sa == statuses(b) and sa != statuses(c)
    assert set(sa) == {206, 503}
    a.set(seed=11)
    assert statuses(a) == sa


def test_bad_clients_get_4xx_and_the_proxy_lives_on(web, data):
    proxy, connect = web

    def raw(payload):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
            s.sendall(payload)
            try:
                return s.recv(65536)
            except ConnectionResetError:
                return b""

    assert raw(b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"GET / HTTP/9.9\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"GET /x HTTP/1.1\r\nNo colon here\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").startswith(
        b"HTTP/1.1 400")
    assert raw(b"GET /x HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
    assert raw(b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").startswith(
        b"HTTP/1.1 501")
    for payload in (b"", b"GET /fault_proxy_test.bin HTTP/1.1\r\n", b"\x00\xff" * 100):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
            s.sendall(payload)  # then gone, mid-head
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.sendall(b"GET /fault_proxy_test.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(100)  # and gone mid-body
    _, body = get(connect())
    assert body == data
    assert proxy.stats()["bad_requests"] == 6


def test_dead_upstream_is_502(start_proxy):
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        proxy = start_proxy(f"127.0.0.1:{closed.getsockname()[1]}")
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        r, body = get(conn, "/x")
        assert r.status == 502 and b"Connection refused" in body
        conn.request("PUT", "/x", body=b"abc")  # the body is read, the connection kept
        r = conn.getresponse()
        assert r.status == 502 and r.read()
        assert proxy.stats()["upstream_errors"] == 2


def test_many_concurrent_clients(web, data):
    proxy, connect = web
    errors = []

    def client(i):
        try:
            conn = connect()
            for k in range(10):
                start = (i * 997 + k * 131) % (BODY_BYTES - 5000)
                r, body = get(conn, headers={"Range": f"bytes={start}-{start + 4999}"})
                assert r.status == 206 and body == data[start:start + 5000]
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = proxy.stats()
    assert s["requests"] == 640 and proxy.data_connections(s) == 64
    assert 1 <= s["upstream_connections_total"] <= 64


def test_s3_through_the_proxy(rgw, start_proxy, s3):
    """SigV4 signatures (over the Host the client sent) verify upstream, uploads
    with Expect: 100-continue pass, and an injected SlowDown is an S3 error."""
    proxy = start_proxy(rgw["AWS_ENDPOINT_URL"].removeprefix("http://"))
    c = s3(rgw, endpoint=proxy.url)
    bucket = "p-" + uuid.uuid4().hex[:12]
    c.create_bucket(Bucket=bucket)
    data = os.urandom(3 << 20)
    c.put_object(Bucket=bucket, Key="k", Body=data)  # botocore sends Expect: 100-continue
    assert c.get_object(Bucket=bucket, Key="k", Range="bytes=5-14")["Body"].read() == data[5:15]
    proxy.set(p503=1)
    for call in (lambda: c.get_object(Bucket=bucket, Key="k"),
                 lambda: c.put_object(Bucket=bucket, Key="k2", Body=data)):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    proxy.set(p503=0, reset=1)
    with pytest.raises((botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError,
                        ConnectionResetError)):
        c.get_object(Bucket=bucket, Key="k")["Body"].read()
    proxy.set(reset=0)
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == data
    assert proxy.stats()["upstream_errors"] == 0


def test_mutated_requests_never_stop_the_proxy(web, data):
    """Seeded random mutations of a valid request (bytes flipped, cut,
    duplicated), each on a connection of its own; the proxy answers or
    closes, and then serves a good request."""
    proxy, connect = web
    rng = random.Random(45)
    good = (b"GET /fault_proxy_test.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=0-99\r\n"
            b"Content-Length: 3\r\nConnection: keep-alive\r\n\r\nabc")
    for _ in range(300):
        m = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            op, at = rng.randrange(3), rng.randrange(len(m))
            if op == 0:
                m[at] = rng.randrange(256)
            elif op == 1:
                del m[at:at + rng.randint(1, 20)]
            else:
                m[at:at] = m[at:at + rng.randint(1, 40)]
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
            s.sendall(bytes(m))
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
    r, body = get(connect(), headers={"Range": "bytes=0-99"})
    assert r.status == 206 and body == data[:100]
