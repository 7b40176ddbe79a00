"""Datasets read from object storage, against the real servers (radosgw for
s3://, nginx for http:// and https://) and the fault proxy in front of them:
what a loader delivers from a URL is what it delivers from the local copy,
byte for byte, in every shuffle mode and through faults; verify and inspect
read URLs; bad settings, missing buckets and prefixes, a replaced object and a
server that never recovers end in one clear line; Ctrl-C during a slow read
is prompt.

Each reader runs in a process of its own (the tools, loader_dump, or a Python
script), because the object-storage settings are read from the environment
once per process."""
import json
import pathlib
import shutil
import signal
import subprocess
import textwrap

import pytest

from readers import DUMP, HANG, PACK, child_env, dump, one_line_error, run


@pytest.mark.parametrize("kind", ["raw", "jpeg"])
@pytest.mark.parametrize("shuffle", ["none", "full", "block"])
def test_an_epoch_from_a_url_is_the_local_epoch(datasets, rgw, nginx, tmp_path, kind, shuffle):
    sets, _ = datasets
    env = child_env(rgw, nginx)
    for rank_args in ([], ["--rank", 1, "--world", 2]):
        args = ["--shuffle", shuffle, "--seed", 7, *rank_args]
        want = dump(sets[kind]["local"], tmp_path / "local", env, kind, *args)
        for where in ("s3", "http", "https"):
            got = dump(sets[kind][where], tmp_path / where, env, kind, *args)
            assert got == want, f"{where} {shuffle} {rank_args}: the epoch differs from the local one"


def test_verify_and_inspect_read_urls(datasets, rgw, nginx):
    sets, _ = datasets
    env = child_env(rgw, nginx)
    for kind in ("raw", "jpeg"):
        local = json.loads(run([PACK, "inspect", sets[kind]["local"], "--json"], env).stdout)
        for where in ("s3", "http", "https"):
            url = sets[kind][where]
            r = run([PACK, "verify", url], env)
            assert r.stdout.startswith("OK " + url), r.stdout
            remote = json.loads(run([PACK, "inspect", url, "--json"], env).stdout)
            for field in ("records", "classes", "shards"):
                assert remote[field] == local[field]


def test_verify_finds_a_flipped_byte_in_a_remote_shard(datasets, rgw, nginx, s3, tmp_path):
    sets, bucket = datasets
    src = pathlib.Path(sets["jpeg"]["local"])
    client = s3(rgw)
    for f in sorted(src.iterdir()):
        data = bytearray(f.read_bytes())
        if f.name == "shard-00002.sks":
            data[len(data) // 3] ^= 0x10
        client.put_object(Bucket=bucket, Key=f"flipped/{f.name}", Body=bytes(data))
    r = run([PACK, "verify", f"s3://{bucket}/flipped"], child_env(rgw, nginx), check=False)
    assert r.returncode == 1, r.stderr
    assert f"s3://{bucket}/flipped/shard-00002.sks" in r.stdout + r.stderr


SKIP = textwrap.dedent("""
    import sys, hashlib, shardkit
    out = []
    for path in sys.argv[1:]:
        loader = shardkit.Loader(path, batch_size=8, transform="none", size=32, rank=0, world_size=1,
                                 seed=1, shuffle="full", workers=2, on_corrupt="skip")
        h = hashlib.sha256()
        for x, y in loader:
            h.update(x.numpy().tobytes() + y.numpy().tobytes())
        st = loader.stats()
        out.append((h.hexdigest(), st["corrupt_records"], st["samples_replaced"]))
    assert out[0] == out[1], out
    print("same", out[0][1], out[0][2])
""")


def test_the_skip_policy_on_a_damaged_remote_shard_is_the_local_one(binding, datasets, rgw, nginx, s3,
                                                                     tmp_path):
    sets, bucket = datasets
    src, damaged = pathlib.Path(sets["jpeg"]["local"]), tmp_path / "damaged"
    shutil.copytree(src, damaged)
    shard = damaged / "shard-00001.sks"
    data = bytearray(shard.read_bytes())
    data[len(data) // 4] ^= 0x40  # inside a record: its CRC fails
    shard.write_bytes(bytes(data))
    client = s3(rgw)
    for f in sorted(damaged.iterdir()):
        client.upload_file(str(f), bucket, f"damaged/{f.name}")
    r = run(["/usr/bin/python3", "-c", SKIP, str(damaged), f"s3://{bucket}/damaged"],
            child_env(rgw, nginx))
    words = r.stdout.split()
    assert words[0] == "same" and int(words[1]) >= 1 and int(words[2]) >= 1, r.stdout


RESUME = textwrap.dedent("""
    import sys, hashlib, shardkit
    url, local, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def digest(batches):
        return [hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest() for x, y in batches]
    opts = dict(batch_size=16, transform="none", rank=0, world_size=1, seed=3, shuffle="full", workers=2)
    whole = digest(shardkit.Loader(local, **opts))
    first = shardkit.Loader(url, **opts)
    it = iter(first)
    head = digest(next(it) for _ in range(stop))
    state = first.state_dict()
    del it, first
    again = shardkit.Loader(url, **opts)
    again.load_state_dict(state)
    rest = digest(again)
    assert head + rest == whole, "the resumed epoch differs"
    print("resumed", len(head), len(rest))
""")


def test_a_mid_epoch_state_resumes_from_s3(binding, datasets, rgw, nginx):
    sets, _ = datasets
    r = run(["/usr/bin/python3", "-c", RESUME, sets["raw"]["s3"], sets["raw"]["local"], 100],
            child_env(rgw, nginx))
    assert r.stdout.split() == ["resumed", "100", str(625 - 100)], r.stdout


def test_dataset_items_from_a_url_are_the_local_ones(binding, datasets, rgw, nginx):
    sets, _ = datasets
    script = textwrap.dedent("""
        import sys, shardkit
        a, b = shardkit.Dataset(sys.argv[1]), shardkit.Dataset(sys.argv[2])
        assert len(a) == len(b) and a.classes == b.classes
        for i in list(range(0, len(a), 7)) + [len(a) - 1]:
            (pa, la), (pb, lb) = a[i], b[i]
            assert la == lb and bytes(pa) == bytes(pb), i
        print("same", len(a))
    """)
    for kind in ("raw", "jpeg"):
        for where in ("s3", "https"):
            r = run(["/usr/bin/python3", "-c", script, sets[kind][where], sets[kind]["local"]],
                    child_env(rgw, nginx))
            assert r.stdout.startswith("same"), r.stdout


def test_wrong_settings_missing_buckets_and_prefixes_are_one_line_at_open(datasets, rgw, nginx):
    sets, bucket = datasets
    url = sets["raw"]["s3"]
    cases = [
        (dict(AWS_SECRET_ACCESS_KEY="wrong"), url,
         "SignatureDoesNotMatch (the secret key does not match the key id: credentials from the "
         "environment (AWS_ACCESS_KEY_ID)"),
        (dict(AWS_ACCESS_KEY_ID="NOSUCHKEY"), url,
         "InvalidAccessKeyId (the server does not take the key: credentials from the environment"),
        (dict(AWS_NO_SIGN_REQUEST="1"), url, "AccessDenied"),
        ({}, "s3://no-such-bucket-sk/sets/raw", "NoSuchBucket (no such bucket at"),
        ({}, f"s3://{bucket}/no/such/prefix", "no manifest.json (not a shardkit dataset"),
        (dict(AWS_ENDPOINT_URL="http://127.0.0.1:9"), url, "Couldn't connect"),
        (dict(AWS_ENDPOINT_URL="127.0.0.1:9"), url, "AWS_ENDPOINT_URL=127.0.0.1:9: expected http://"),
        (dict(AWS_ACCESS_KEY_ID=None), url, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"),
        ({}, sets["raw"]["http"] + "-missing", "no manifest.json"),
        (dict(AWS_CA_BUNDLE=None), sets["raw"]["https"], "SSL certificate problem"),
    ]
    for extra, path, expected in cases:
        for cmd in (["verify", path], ["inspect", path]):
            line = one_line_error(run([PACK, *cmd], child_env(rgw, nginx, **extra), check=False))
            assert expected in line, (extra, path, line)
    # With verification off, the self-signed server is read.
    env = child_env(rgw, nginx, AWS_CA_BUNDLE=None, SHARDKIT_TLS_VERIFY=0)
    assert run([PACK, "verify", sets["raw"]["https"]], env).returncode == 0


REPLACE = textwrap.dedent("""
    import sys, boto3, os, shardkit
    url, bucket, key = sys.argv[1:4]
    loader = shardkit.Loader(url, batch_size=4, transform="none", rank=0, world_size=1,
                             shuffle="none", workers=1, prefetch=1, read_depth=1)
    it = iter(loader)
    next(it)
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=body[:-1] + bytes([body[-1] ^ 1]))
    try:
        for _ in it:
            pass
    except OSError as e:  # an I/O error, not corruption: no skip policy hides it
        print("ERROR", e)
    else:
        print("NO ERROR")
""")


def test_an_object_replaced_mid_epoch_is_an_error_naming_it(binding, datasets, rgw, nginx, s3):
    sets, bucket = datasets
    client = s3(rgw)
    src = pathlib.Path(sets["jpeg"]["local"])
    for f in sorted(src.iterdir()):
        client.upload_file(str(f), bucket, f"replaced/{f.name}")
    last = sorted(p.name for p in src.glob("shard-*.sks"))[-1]
    r = run(["/usr/bin/python3", "-c", REPLACE, f"s3://{bucket}/replaced", bucket,
             f"replaced/{last}"], child_env(rgw, nginx))
    assert r.stdout.startswith("ERROR"), r.stdout + r.stderr
    assert f"s3://{bucket}/replaced/{last}" in r.stdout
    assert "changed since it was opened" in r.stdout


@pytest.mark.parametrize("kind", ["raw", "jpeg"])
def test_an_epoch_through_ten_percent_faults_is_the_same_epoch(datasets, rgw, nginx, proxied,
                                                               tmp_path, kind):
    sets, _ = datasets
    env = child_env(rgw, nginx)
    want = dump(sets[kind]["local"], tmp_path / "local", env, kind, "--shuffle", "full")
    proxied.set(p503=0.04, p500=0.01, reset=0.025, cut=0.025)
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url, SHARDKIT_RETRY_SECONDS=60)
    got = dump(sets[kind]["s3"], tmp_path / "s3", env, kind, "--shuffle", "full")
    assert got == want
    stats = proxied.stats()
    faults = sum(stats[k] for k in ("503", "500", "reset", "cut"))
    assert faults > 0, stats  # the faults happened, and were ridden out
    r = run([PACK, "verify", sets[kind]["s3"]], env)
    assert r.returncode == 0


def test_a_tls_handshake_cut_short_is_retried(datasets, rgw, nginx, start_proxy, tmp_path):
    """A reset during the TLS handshake is the network's, not an untrusted
    certificate: retried (a few times in a row at most), then the read goes on."""
    sets, _ = datasets
    https = nginx["SHARDKIT_TEST_HTTPS_URL"]
    hostport = https.removeprefix("https://").split("/")[0]
    env = child_env(rgw, nginx)
    want = dump(sets["raw"]["local"], tmp_path / "local", env, "raw")
    proxy = start_proxy(hostport, "--tcp", 1, "--handshake_resets", 2)
    url = sets["raw"]["https"].replace(hostport, f"127.0.0.1:{proxy.port}")
    assert dump(url, tmp_path / "through", env, "raw") == want
    # Resets every time: given up after a few tries, saying what happened.
    proxy = start_proxy(hostport, "--tcp", 1, "--handshake_resets", 1000)
    url = sets["raw"]["https"].replace(hostport, f"127.0.0.1:{proxy.port}")
    line = one_line_error(run([PACK, "verify", url], env, check=False))
    assert "gave up after 5 tries" in line and "AWS_CA_BUNDLE" not in line, line


def test_a_server_that_only_answers_503_fails_clearly(datasets, rgw, nginx, proxied, tmp_path):
    sets, _ = datasets
    proxied.set(p503=1.0)
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url, SHARDKIT_RETRY_SECONDS=2)
    line = one_line_error(run([PACK, "verify", sets["raw"]["s3"]], env, check=False))
    assert "HTTP 503 SlowDown" in line and "gave up after" in line, line
    r = run([DUMP, sets["jpeg"]["s3"], tmp_path / "x", "--transform", "none"], env, check=False)
    assert r.returncode == 2 and "HTTP 503 SlowDown" in r.stderr, r.stderr


CTRL_C = textwrap.dedent("""
    import linecache, sys, threading, time, urllib.request, shardkit
    url, proxy = sys.argv[1], sys.argv[2]
    loader = shardkit.Loader(url, batch_size=16, transform="none", rank=0, world_size=1,
                             workers=1, shuffle="full")
    # From now on every request hangs after its headers.
    urllib.request.urlopen(proxy + "/__fault__/set?stall=1.0", timeout=30).read()
    it = iter(loader)
    main = threading.main_thread().ident
    def announce():
        # "waiting" once the main thread is inside the core's next(): its
        # innermost Python frame is then the line that calls it.
        while True:
            f = sys._current_frames().get(main)
            if f is not None and "_core.next()" in linecache.getline(f.f_code.co_filename,
                                                                    f.f_lineno or 0):
                break
            time.sleep(0.001)
        print("waiting", flush=True)
    threading.Thread(target=announce, daemon=True).start()
    try:
        next(it)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


def readline(p, timeout=HANG):
    """A line of P's stdout, or "" if none comes within TIMEOUT seconds."""
    import selectors
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        return p.stdout.readline() if sel.select(timeout=timeout) else ""


def test_ctrl_c_during_a_stalled_read_is_prompt(binding, datasets, rgw, nginx, proxied, tmp_path):
    sets, _ = datasets
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url, SHARDKIT_STALL_SECONDS=3600,
                    SHARDKIT_RETRY_SECONDS=3600)
    p = subprocess.Popen(["/usr/bin/python3", str(script), sets["raw"]["s3"], proxied.url],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert readline(p).strip() == "waiting", "the child never got into next()"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=HANG)
    finally:
        p.kill()
    # Interrupted inside next(), and the loader (reads stalled for an hour)
    # shut down at exit without waiting for them.
    assert out.strip() == "interrupted", (out, err)
    assert p.returncode == 0, err


CTRL_C_OPEN = textwrap.dedent("""
    import linecache, sys, threading, time, urllib.request, shardkit
    url, proxy, what = sys.argv[1], sys.argv[2], sys.argv[3]
    # Every request hangs after its headers: the open waits on its HEADs.
    urllib.request.urlopen(proxy + "/__fault__/set?stall=1.0", timeout=30).read()
    main = threading.main_thread().ident
    marker = "self._core = _Loader(" if what == "loader" else "self._core = _Dataset("
    def announce():
        while True:
            f = sys._current_frames().get(main)
            if f is not None and marker in linecache.getline(f.f_code.co_filename, f.f_lineno or 0):
                break
            time.sleep(0.001)
        print("opening", flush=True)
    threading.Thread(target=announce, daemon=True).start()
    try:
        if what == "loader":
            shardkit.Loader(url, batch_size=16, transform="none", workers=1)
        else:
            shardkit.Dataset(url)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


@pytest.mark.parametrize("what", ["loader", "dataset"])
def test_ctrl_c_while_opening_on_a_stalled_server_is_prompt(binding, datasets, rgw, nginx, proxied,
                                                            tmp_path, what):
    """Opening (the manifest, every shard's HEAD, their retries) ends at Ctrl-C."""
    sets, _ = datasets
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url, SHARDKIT_STALL_SECONDS=3600,
                    SHARDKIT_RETRY_SECONDS=3600)
    p = subprocess.Popen(["/usr/bin/python3", "-c", CTRL_C_OPEN, sets["raw"]["s3"], proxied.url,
                          what], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert readline(p).strip() == "opening", "the child never got into the open"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=HANG)
    finally:
        p.kill()
    assert out.strip() == "interrupted", (out, err)
    assert p.returncode == 0, err
