"""Fixtures for the server tests: the datasets the object-storage tests read
(local, in a bucket, under nginx); the env files that the ctest fixtures rgw and
nginx write (under $SHARDKIT_SERVERS_DIR), and fault_proxy processes started
per test ($SHARDKIT_FAULT_PROXY) and stopped by PID."""
import json
import os
import pathlib
import selectors
import shutil
import subprocess
import sys
import urllib.request
import uuid

import boto3
import pytest
from botocore.config import Config
from readers import BUILD, DUMP, FASHION, HERE, PACK, run


def parse_env(path):
    """The NAME=VALUE pairs of an env file of `export NAME=VALUE` lines."""
    env = {}
    for line in pathlib.Path(path).read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip('"')
    return env


@pytest.fixture(scope="session")
def read_env():
    return parse_env


def servers_dir():
    d = os.environ.get("SHARDKIT_SERVERS_DIR")
    if not d:
        pytest.fail("SHARDKIT_SERVERS_DIR is not set: run through ctest (fixtures rgw and nginx)")
    return pathlib.Path(d)


def server_env(name):
    path = servers_dir() / name / "env"
    if not path.exists():
        pytest.fail(f"{path} is missing: the {name}_start fixture did not run or failed")
    return parse_env(path)


@pytest.fixture(scope="session")
def rgw():
    return server_env("rgw")


@pytest.fixture(scope="session")
def nginx():
    return server_env("nginx")


def make_s3(env, endpoint=None, secret=None, key=None, region=None):
    """A boto3 S3 client for the radosgw of ENV (path-style, no retries), at
    ENDPOINT instead when given (a proxy in front of it)."""
    return boto3.client(
        "s3", endpoint_url=endpoint or env["AWS_ENDPOINT_URL"],
        aws_access_key_id=key or env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or env["AWS_SECRET_ACCESS_KEY"],
        region_name=region or env["AWS_REGION"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


@pytest.fixture(scope="session")
def s3():
    return make_s3


@pytest.fixture(scope="session")
def www():
    """nginx's DOC_ROOT."""
    return servers_dir() / "www"


class Proxy:
    """A running fault_proxy: its port and its control requests."""

    def __init__(self, upstream, args):
        exe = os.environ.get("SHARDKIT_FAULT_PROXY")
        if not exe:
            pytest.fail("SHARDKIT_FAULT_PROXY is not set: run through ctest")
        self.proc = subprocess.Popen([exe, "--upstream", upstream, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        line = self.proc.stdout.readline() if sel.select(timeout=60) else ""
        sel.close()
        if not line.startswith("listening "):
            self.proc.kill()
            pytest.fail(f"fault_proxy did not say 'listening PORT': {line!r} "
                        f"{self.proc.stderr.read()!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.control_connections = 0

    def control(self, path):
        """A control request (on a connection of its own, which the proxy's
        client_connections_total counts: see data_connections)."""
        self.control_connections += 1
        with urllib.request.urlopen(self.url + "/__fault__/" + path, timeout=30) as r:
            return json.loads(r.read())

    def set(self, **knobs):
        return self.control("set?" + "&".join(f"{k}={v}" for k, v in knobs.items()))

    def stats(self):
        return self.control("stats")

    def data_connections(self, stats):
        """Client connections in STATS that were not control requests'."""
        return stats["client_connections_total"] - self.control_connections

    def stop(self):
        alive = self.proc.poll() is None
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return alive


@pytest.fixture
def start_proxy():
    """start_proxy(upstream "HOST:PORT", *args) -> Proxy; each is checked to be
    still running (it never crashed) and stopped at the end of the test."""
    started = []

    def start(upstream, *args):
        started.append(Proxy(upstream, [str(a) for a in args]))
        return started[-1]

    yield start
    crashed = [p.proc.returncode for p in started if not p.stop()]
    assert not crashed, f"fault_proxy exited during the test (codes {crashed})"


@pytest.fixture(scope="session")
def datasets(rgw, nginx, s3, www, tmp_path_factory):
    """Two datasets, local, in a bucket and under nginx: `raw` (Fashion-MNIST's
    test set, zstd blocks, 4 shards) and `jpeg` (real photographs, stored
    records, 5 shards). Returns {kind: {"local", "s3", "http", "https"}} and
    the bucket."""
    for tool in (PACK, DUMP):
        if not tool.exists():
            pytest.fail(f"not built: {tool}")
    tmp = tmp_path_factory.mktemp("object_store")
    local = {"raw": tmp / "raw", "jpeg": tmp / "jpeg"}
    run([PACK, "idx", "--images", FASHION / "t10k-images-idx3-ubyte.gz", "--labels",
         FASHION / "t10k-labels-idx1-ubyte.gz", "--shard-size", 2_000_000, local["raw"]], os.environ)
    tree = tmp / "tree"
    run([sys.executable, HERE.parent.parent / "scripts" / "make_jpeg_set.py", tree, "--per-class", 8,
         "--long-side", 160], os.environ)
    run([PACK, "imagenet", tree, local["jpeg"], "--shard-size", 300_000], os.environ)
    bucket = "sk-" + uuid.uuid4().hex[:10]
    client = s3(rgw)
    client.create_bucket(Bucket=bucket)
    web = "os-" + uuid.uuid4().hex[:8]
    out = {}
    for kind, d in local.items():
        for f in sorted(d.iterdir()):
            client.upload_file(str(f), bucket, f"sets/{kind}/{f.name}")
        shutil.copytree(d, www / web / kind)
        out[kind] = {"local": str(d), "s3": f"s3://{bucket}/sets/{kind}",
                     "http": f"{nginx['SHARDKIT_TEST_HTTP_URL']}/{web}/{kind}",
                     "https": f"{nginx['SHARDKIT_TEST_HTTPS_URL']}/{web}/{kind}"}
    yield out, bucket
    shutil.rmtree(www / web, ignore_errors=True)


@pytest.fixture
def proxied(datasets, rgw, start_proxy):
    """A fault proxy in front of radosgw, and the env that reads through it."""
    proxy = start_proxy(rgw["AWS_ENDPOINT_URL"].removeprefix("http://"), "--seed", 5)
    return proxy


@pytest.fixture(scope="session")
def binding():
    """The Python binding, for tests whose readers are Python scripts: a build
    without it (the sanitizer builds) runs the others."""
    if not (BUILD / "python" / "shardkit" / "__init__.py").exists():
        pytest.skip("the Python binding is not built in " + str(BUILD))
