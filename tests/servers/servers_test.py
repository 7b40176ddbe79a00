"""The tests' servers as a client sees them: radosgw through boto3 (what the
S3 client relies on: ranges, ETags, If-Match, the errors it must recognise,
multipart) and nginx through http.client (ranges, validators, keep-alive,
TLS verified against the env's certificate); and the start/stop scripts
(instances side by side, stopped by PID, state removed, bad input refused)."""
import http.client
import io
import os
import pathlib
import ssl
import subprocess
import uuid

import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = pathlib.Path(__file__).parent


def error_of(call):
    """(HTTP status, S3 error code) of a call that must fail."""
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call()
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


@pytest.fixture
def bucket(rgw, s3):
    name = "t-" + uuid.uuid4().hex[:12]
    s3(rgw).create_bucket(Bucket=name)
    return name


def test_object_put_ranged_get_head_list_delete(rgw, bucket, s3):
    c = s3(rgw)
    data = bytes(range(256)) * 64
    c.put_object(Bucket=bucket, Key="dir/a.bin", Body=data)
    c.put_object(Bucket=bucket, Key="other", Body=b"x")
    head = c.head_object(Bucket=bucket, Key="dir/a.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].startswith('"') and "LastModified" in head
    r = c.get_object(Bucket=bucket, Key="dir/a.bin", Range="bytes=100-199")
    headers = r["ResponseMetadata"]["HTTPHeaders"]
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert headers["content-range"] == f"bytes 100-199/{len(data)}"
    assert headers["etag"] == head["ETag"]
    assert r["Body"].read() == data[100:200]
    # A range past the end is cut to the object; one wholly past it is 416.
    n = len(data)
    r = c.get_object(Bucket=bucket, Key="dir/a.bin", Range=f"bytes={n - 5}-{n + 100}")
    assert r["ContentRange"] == f"bytes {n - 5}-{n - 1}/{n}"
    assert error_of(lambda: c.get_object(Bucket=bucket, Key="dir/a.bin", Range=f"bytes={n}-")) == \
        (416, "InvalidRange")
    listed = c.list_objects_v2(Bucket=bucket, Prefix="dir/")["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("dir/a.bin", n, head["ETag"])]
    c.delete_object(Bucket=bucket, Key="dir/a.bin")
    assert error_of(lambda: c.get_object(Bucket=bucket, Key="dir/a.bin")) == (404, "NoSuchKey")
    assert error_of(lambda: c.head_object(Bucket=bucket, Key="dir/a.bin"))[0] == 404


def test_wrong_credentials_are_403(rgw, bucket, s3):
    assert error_of(lambda: s3(rgw, secret="wrong").list_objects_v2(Bucket=bucket)) == \
        (403, "SignatureDoesNotMatch")
    assert error_of(lambda: s3(rgw, key="NOSUCHKEY").list_objects_v2(Bucket=bucket)) == \
        (403, "InvalidAccessKeyId")


def test_missing_bucket_is_404_no_such_bucket(rgw, s3):
    c = s3(rgw)
    assert error_of(lambda: c.get_object(Bucket="no-such-bucket-x", Key="k")) == \
        (404, "NoSuchBucket")
    assert error_of(lambda: c.list_objects_v2(Bucket="no-such-bucket-x")) == (404, "NoSuchBucket")


def test_if_match_pins_the_etag(rgw, bucket, s3):
    c = s3(rgw)
    c.put_object(Bucket=bucket, Key="k", Body=b"first")
    etag = c.head_object(Bucket=bucket, Key="k")["ETag"]
    def get():
        return c.get_object(Bucket=bucket, Key="k", Range="bytes=0-1", IfMatch=etag)

    assert get()["Body"].read() == b"fi"
    c.put_object(Bucket=bucket, Key="k", Body=b"second")  # replaced
    assert error_of(get) == (412, "PreconditionFailed")


def test_multipart_upload(rgw, bucket, s3):
    c = s3(rgw)
    data = os.urandom(11 << 20)  # parts of 5, 5 and 1 MiB
    parts = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    c.upload_fileobj(io.BytesIO(data), bucket, "mp", Config=parts)
    head = c.head_object(Bucket=bucket, Key="mp")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-3"')
    edge = 5 << 20
    r = c.get_object(Bucket=bucket, Key="mp", Range=f"bytes={edge - 10}-{edge + 9}")
    assert r["Body"].read() == data[edge - 10:edge + 10]
    assert c.get_object(Bucket=bucket, Key="mp")["Body"].read() == data


def test_any_region_in_the_signature_is_accepted(rgw, bucket, s3):
    for region in (rgw["AWS_REGION"], "us-east-1", "eu-west-3"):
        assert s3(rgw, region=region).list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_signature_needs_x_amz_content_sha256(rgw, bucket, s3):
    """A SigV4 request without x-amz-content-sha256 is refused as a bad signature."""
    creds = Credentials(rgw["AWS_ACCESS_KEY_ID"], rgw["AWS_SECRET_ACCESS_KEY"])
    host = rgw["AWS_ENDPOINT_URL"].removeprefix("http://")

    def status(extra):
        req = AWSRequest(method="GET", url=f"http://{host}/{bucket}", headers=dict(extra))
        SigV4Auth(creds, "s3", rgw["AWS_REGION"]).add_auth(req)
        conn = http.client.HTTPConnection(host, timeout=30)
        conn.request("GET", f"/{bucket}", headers=dict(req.headers.items()))
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, body

    code, body = status({})
    assert code == 403 and b"SignatureDoesNotMatch" in body
    assert status({"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})[0] == 200


def https_connection(nginx, host="127.0.0.1", ca=True):
    port = int(nginx["SHARDKIT_TEST_HTTPS_URL"].rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=nginx["SHARDKIT_TEST_CA_CERT"] if ca else None)
    return http.client.HTTPSConnection(host, port, context=ctx, timeout=30)


def test_nginx_ranges_validators_keepalive_tls(nginx, www):
    data = os.urandom(100000)
    (www / "servers_test.bin").write_bytes(data)
    http_port = int(nginx["SHARDKIT_TEST_HTTP_URL"].rsplit(":", 1)[1])
    plain = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
    for conn in (plain, https_connection(nginx), https_connection(nginx, host="localhost")):
        etag = None
        for start in (0, 50000, 99990):  # one connection, kept alive
            conn.request("GET", "/servers_test.bin",
                         headers={"Range": f"bytes={start}-{start + 9}"})
            r = conn.getresponse()
            assert r.status == 206 and r.read() == data[start:start + 10]
            assert r.getheader("Content-Range") == f"bytes {start}-{start + 9}/{len(data)}"
            assert r.getheader("Last-Modified") and r.getheader("Connection") == "keep-alive"
            assert etag in (None, r.getheader("ETag"))
            etag = r.getheader("ETag")
            assert conn.sock is not None
        conn.close()
    for make in (lambda: http.client.HTTPConnection("127.0.0.1", http_port, timeout=30),
                 lambda: https_connection(nginx)):
        for method, headers, status in (("GET", {"Range": "bytes=0-1", "If-Match": '"other"'}, 412),
                                        ("PUT", {}, 403)):  # read-only
            conn = make()
            conn.request(method, "/servers_test.bin", headers=headers,
                         body=b"x" if method == "PUT" else None)
            r = conn.getresponse()
            r.read()
            assert r.status == status
            conn.close()
    with pytest.raises(ssl.SSLCertVerificationError):
        conn = https_connection(nginx, ca=False)
        conn.request("GET", "/servers_test.bin")


def run_script(*args, env=None):
    return subprocess.run([str(HERE / args[0]), *args[1:]], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def pids_alive(pids):
    return [p for p in pids if pathlib.Path(f"/proc/{p}").exists() and
            pathlib.Path(f"/proc/{p}/stat").read_text().split()[2] not in "ZX"]


def test_second_rgw_runs_beside_the_first_and_stops_clean(rgw, tmp_path, read_env, s3):
    state = tmp_path / "rgw2"
    r = run_script("rgw.sh", "start", state)
    assert r.returncode == 0, r.stderr
    try:
        env2 = read_env(state / "env")
        assert env2["AWS_ENDPOINT_URL"] != rgw["AWS_ENDPOINT_URL"]
        name = "only-in-second-" + uuid.uuid4().hex[:8]
        s3(env2).create_bucket(Bucket=name)
        assert name in [b["Name"] for b in s3(env2).list_buckets()["Buckets"]]
        assert name not in [b["Name"] for b in s3(rgw).list_buckets()["Buckets"]]
        pids = env2["SHARDKIT_RGW_PIDS"].split()
        assert len(pids) == 4 and pids_alive(pids) == pids  # mon, osd, two gateways
    finally:
        r = run_script("rgw.sh", "stop", state)
    assert r.returncode == 0, r.stderr
    assert pids_alive(pids) == [] and not state.exists()


def test_nginx_stop_ends_master_and_workers(tmp_path, www, read_env):
    state = tmp_path / "nginx2"
    r = run_script("nginx.sh", "start", state, www)
    assert r.returncode == 0, r.stderr
    master = read_env(state / "env")["SHARDKIT_NGINX_PID"]
    workers = [p.name for p in pathlib.Path("/proc").iterdir() if p.name.isdigit() and
               (p / "stat").exists() and (p / "stat").read_text().split()[3] == master]
    assert workers and pids_alive([master])
    r = run_script("nginx.sh", "stop", state)
    assert r.returncode == 0, r.stderr
    assert pids_alive([master, *workers]) == [] and not state.exists()


def test_scripts_refuse_bad_input_and_foreign_directories(tmp_path):
    r = run_script("rgw.sh", "start", tmp_path / "s", env={"SHARDKIT_RGW_STORE_BYTES": "lots"})
    assert r.returncode == 2 and "SHARDKIT_RGW_STORE_BYTES" in r.stderr
    assert not (tmp_path / "s").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not a server's")
    for script, args in (("rgw.sh", ()), ("nginx.sh", (tmp_path,))):
        r = run_script(script, "start", foreign, *args)
        assert r.returncode != 0 and "refusing" in r.stderr
        r = run_script(script, "stop", foreign)
        assert (foreign / "keep.txt").read_text() == "not a server's"
    r = run_script("nginx.sh", "start", tmp_path / "n", tmp_path / "no-such-root")
    assert r.returncode != 0 and "not a directory" in r.stderr
    assert run_script("rgw.sh", "restart", tmp_path / "s").returncode == 2
