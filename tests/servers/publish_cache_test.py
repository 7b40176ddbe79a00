"""Publishing to S3, staging from it and the node cache, against radosgw and
the fault proxy: a push killed anywhere never leaves a manifest, a rerun
sends only what is missing, a push over another dataset never shows a
manifest naming what it replaces; slurm/stage.sh stages from s3:// and
resumes after a kill; ranks and jobs that share a cache download each chunk
once, the limit holds under a full shuffle, a cache file cut short by a kill
is fetched again, and a reader keeps what it has open when another evicts.

Waits are for states (an object listed, a file present, the proxy holding a
request), each bounded by HANG; nothing sleeps for a time."""
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import textwrap
import time
import uuid

import pytest
from readers import HANG, HERE, PACK, child_env, one_line_error, run

ROOT = HERE.parent.parent


def wait_for(what, check, bound=HANG):
    """Polls `check` until it is true; fails naming `what` after `bound` s."""
    deadline = time.monotonic() + bound
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("never happened: " + what)
        time.sleep(0.05)


def keys(client, bucket, prefix):
    r = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for o in r.get("Contents", []))


def push(src, url, env, *args):
    return subprocess.Popen([str(PACK), "push", str(src), url, *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill(p):
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=HANG)


def test_push_publishes_the_manifest_last_and_a_rerun_sends_only_the_rest(
        datasets, rgw, nginx, s3, proxied, tmp_path):
    sets, bucket = datasets
    src = pathlib.Path(sets["jpeg"]["local"])
    shards = sorted(p.name for p in src.glob("shard-*.sks"))
    client, prefix = s3(rgw), f"pushed-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    slow = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url)
    # Killed once some shards are up: no manifest.
    proxied.set(latency_ms=200)
    p = push(src, url, slow, "--jobs", 1)
    wait_for("a shard uploaded", lambda: len(keys(client, bucket, prefix)) >= 2)
    kill(p)
    assert "manifest.json" not in keys(client, bucket, prefix)
    # Killed while the manifest itself is being sent: still none.
    proxied.set(latency_ms=0, match=f"PUT+/{bucket}/{prefix}manifest.json", hold=1.0)
    p = push(src, url, slow, "--jobs", 2)
    wait_for("the manifest's upload held", lambda: proxied.stats()["hold"] >= 1)
    kill(p)
    assert "manifest.json" not in keys(client, bucket, prefix)
    assert set(shards) <= set(keys(client, bucket, prefix))
    proxied.set(hold=0, match="")
    # The rerun sends no shard again: each is there whole.
    r = run([PACK, "push", src, url], child_env(rgw, nginx))
    assert f"uploaded 0 of {len(shards)} shards" in r.stdout, r.stdout
    assert "manifest.json" in keys(client, bucket, prefix)
    assert run([PACK, "verify", url], child_env(rgw, nginx)).returncode == 0
    # A shard damaged remotely is sent again.
    damaged = shards[1]
    body = client.get_object(Bucket=bucket, Key=prefix + damaged)["Body"].read()
    middle = len(body) // 2
    client.put_object(Bucket=bucket, Key=prefix + damaged,
                      Body=body[:middle] + bytes([body[middle] ^ 1]) + body[middle + 1:])
    r = run([PACK, "push", src, url], child_env(rgw, nginx))
    assert f"uploaded 1 of {len(shards)} shards" in r.stdout, r.stdout
    assert run([PACK, "verify", url], child_env(rgw, nginx)).returncode == 0


def idx_files(root, n, seed=7):
    """MNIST-shaped IDX files of N random 28x28 images (incompressible)."""
    rng = random.Random(seed)
    images, labels = root / "images-idx3-ubyte", root / "labels-idx1-ubyte"
    images.write_bytes(bytes([0, 0, 8, 3]) + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 +
                       rng.randbytes(n * 28 * 28))
    labels.write_bytes(bytes([0, 0, 8, 1]) + n.to_bytes(4, "big") +
                       bytes(rng.randrange(10) for _ in range(n)))
    return images, labels


def big_shard(root):
    """A dataset of one 47 MB shard (three 16 MiB parts): its directory and shard."""
    images, labels = idx_files(root, 60_000)
    src = root / "big"
    run([PACK, "idx", "--images", images, "--labels", labels, "--shard-size", 100_000_000, src],
        os.environ)
    return src, src / "shard-00000.sks"


def test_a_shard_of_many_parts_goes_up_whole_and_a_failed_part_leaves_nothing(
        datasets, rgw, nginx, s3, proxied, tmp_path):
    _, bucket = datasets
    src, shard = big_shard(tmp_path)
    assert shard.stat().st_size > 2 * (16 << 20)
    client, prefix = s3(rgw), f"parts-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    # Every attempt at part 2 fails: the push fails naming the shard, and
    # leaves neither the shard, the manifest nor an unfinished upload.
    proxied.set(match="partNumber%3D2%26", p500=1.0)
    failing = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url, SHARDKIT_RETRY_SECONDS=2)
    r = run([PACK, "push", src, url], failing, check=False)
    proxied.set(match="", p500=0)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("shardkit-pack: error:")]
    assert len(errors) == 1 and "shard-00000.sks" in errors[0], r.stderr
    assert "done in" not in r.stderr and "stopped after" in r.stderr, r.stderr
    assert keys(client, bucket, prefix) == []
    assert client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []
    # Through the proxy's latency, the parts in flight together: the object is the file.
    proxied.set(latency_ms=20)
    run([PACK, "push", src, url], child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url))
    proxied.set(latency_ms=0)
    body = client.get_object(Bucket=bucket, Key=prefix + shard.name)["Body"].read()
    assert body == shard.read_bytes()
    assert run([PACK, "verify", url], child_env(rgw, nginx)).returncode == 0
    # The ETag the push expects of three parts is the server's: a rerun keeps the shard.
    r = run([PACK, "push", src, url], child_env(rgw, nginx))
    assert "uploaded 0 of 1 shards" in r.stdout, r.stdout


def test_ctrl_c_during_a_push_aborts_its_uploads_and_a_killed_ones_are_aborted_next_time(
        datasets, rgw, nginx, s3, proxied, tmp_path):
    _, bucket = datasets
    src, shard = big_shard(tmp_path)
    client, prefix = s3(rgw), f"interrupted-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    slow = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url)
    uploads = lambda: client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    # Ctrl-C while a part is held: exit 130, and no upload left unfinished.
    proxied.set(match="partNumber%3D2%26", hold=1.0)
    p = push(src, url, slow)
    wait_for("part 2 held", lambda: proxied.stats()["hold"] >= 1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == 130, err
    assert "interrupted" in err, err
    assert uploads() == [] and keys(client, bucket, prefix) == []
    # SIGKILL cannot be caught: its upload stays, until the next push aborts it.
    held = proxied.stats()["hold"]
    p = push(src, url, slow)
    wait_for("part 2 held again", lambda: proxied.stats()["hold"] > held and len(uploads()) == 1)
    kill(p)
    proxied.set(hold=0, match="")
    assert len(uploads()) == 1
    r = run([PACK, "push", src, url], child_env(rgw, nginx))
    assert "1 unfinished uploads of an earlier push aborted" in r.stdout, r.stdout
    assert uploads() == []
    assert run([PACK, "verify", url], child_env(rgw, nginx)).returncode == 0


def test_a_lost_reply_to_completing_an_upload_is_no_failure(datasets, rgw, nginx, s3, proxied,
                                                            tmp_path):
    _, bucket = datasets
    src, shard = big_shard(tmp_path)
    client, prefix = s3(rgw), f"lost-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    # The server completes the upload; its reply is cut: the retry is told
    # "no such upload", and the object there is the file.
    proxied.set(match=f"POST+/{bucket}/{prefix}shard-00000.sks%3FuploadId", next="reset",
                next_count=1)
    r = run([PACK, "push", src, url], child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url))
    proxied.set(match="", next_count=0)
    assert proxied.stats()["reset"] >= 1
    assert "uploaded 1 of 1 shards" in r.stdout, r.stdout + r.stderr
    assert run([PACK, "verify", url], child_env(rgw, nginx)).returncode == 0


def test_push_to_a_bucket_whose_etags_are_no_md5s(datasets, rgw, nginx, s3, tmp_path):
    """An SSE-KMS bucket's ETags are no MD5 of the bytes: the push (single and
    multipart), its "already there" check and reading it back work alike."""
    from credentials_test import Emulator
    from conftest import servers_dir
    sets, bucket = datasets
    front = Emulator("s3front", "--rgw-env", servers_dir() / "rgw" / "env", "--bucket-region",
                     rgw["AWS_REGION"], "--opaque-etags")
    try:
        env = child_env(rgw, nginx, AWS_ENDPOINT_URL=front.url)
        src, _ = big_shard(tmp_path)
        for i, local in enumerate((sets["jpeg"]["local"], src)):
            url = f"s3://{bucket}/kms-{uuid.uuid4().hex[:6]}-{i}"
            r = run([PACK, "push", local, url], env)
            assert "uploaded" in r.stdout and " 0 already there" in r.stdout, r.stdout
            r = run([PACK, "push", local, url], env)
            assert "uploaded 0 of" in r.stdout, r.stdout  # kept: its stored CRC32C
            assert run([PACK, "verify", url], env).returncode == 0
    finally:
        assert front.stop(), "the S3 front exited during the test"


def test_a_reader_never_takes_shards_of_the_dataset_replacing_the_one_it_opened(
        datasets, rgw, nginx, s3, tmp_path):
    """What a reader that read the old manifest meets while push --force
    replaces the shards with ones of the same size: an error naming the
    shard, never a mix."""
    sets, bucket = datasets
    client, prefix = s3(rgw), f"mixed-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    env = child_env(rgw, nginx)
    old = pathlib.Path(sets["raw"]["local"])
    new = tmp_path / "new"
    shutil.copytree(old, new)
    manifest = json.loads((new / "manifest.json").read_text())
    target = new / manifest["shards"][1]["file"]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1  # the same size and records, other bytes
    target.write_bytes(bytes(data))
    manifest["shards"][1]["crc32c"] = run([PACK, "checksum", target], env).stdout.split()[0]
    (new / "manifest.json").write_text(json.dumps(manifest))
    run([PACK, "push", new, url], env)
    client.put_object(Bucket=bucket, Key=prefix + "manifest.json",
                      Body=(old / "manifest.json").read_bytes())
    line = one_line_error(run([PACK, "inspect", url], env, check=False))
    assert manifest["shards"][1]["file"] in line and "is not the shard the manifest names" in line


def test_a_push_that_a_rerun_cannot_help_does_not_say_rerun(datasets, rgw, nginx, tmp_path):
    """"rerun to resume" only where the server did not answer or kept failing."""
    sets, bucket = datasets
    src = sets["raw"]["local"]
    cases = [
        (child_env(rgw, nginx), "s3://no-such-bucket-sk/ds", "NoSuchBucket"),
        (child_env(rgw, nginx, AWS_SECRET_ACCESS_KEY="wrong"), f"s3://{bucket}/x",
         "SignatureDoesNotMatch"),
        (child_env(rgw, nginx), "http://127.0.0.1:9/ds", "push writes to s3://"),
        (child_env(rgw, nginx), f"s3://{bucket}/y", "pack it first"),
    ]
    for env, url, expected in cases:
        what = tmp_path / "tree" if expected == "pack it first" else src
        if expected == "pack it first":  # a raw class-folder tree, as the README once showed
            (tmp_path / "tree" / "cat").mkdir(parents=True, exist_ok=True)
            (tmp_path / "tree" / "cat" / "a.jpg").write_bytes(b"\xff\xd8")
        line = one_line_error(run([PACK, "push", what, url], env, check=False))
        # (the test's own folder is named after it, "rerun" included)
        assert expected in line and "rerun" not in line.replace(str(tmp_path), "TMP"), (url, line)
    r = run([PACK, "push", src, f"s3://{bucket}/z"],
            child_env(rgw, nginx, AWS_ENDPOINT_URL="http://127.0.0.1:9"), check=False)
    assert r.returncode == 2 and "rerun to resume" in r.stderr, r.stderr  # a server that never answered


def test_a_damaged_local_shard_is_never_published(datasets, rgw, nginx, s3, tmp_path):
    _, bucket = datasets
    src, shard = big_shard(tmp_path)
    data = bytearray(shard.read_bytes())
    data[len(data) * 3 // 4] ^= 0x10  # in the last part: found only once every byte was read
    shard.write_bytes(bytes(data))
    client, prefix = s3(rgw), f"damaged-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    r = run([PACK, "push", src, url], child_env(rgw, nginx), check=False)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("shardkit-pack: error:")]
    assert len(errors) == 1 and "shard-00000.sks" in errors[0], r.stderr
    assert "checksum is not the manifest's" in errors[0], r.stderr
    assert keys(client, bucket, prefix) == []
    assert client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []


def test_a_push_over_another_dataset_never_shows_a_manifest_naming_what_it_replaces(
        datasets, rgw, nginx, s3, proxied):
    sets, bucket = datasets
    client, prefix = s3(rgw), f"replaced-{uuid.uuid4().hex[:6]}/"
    url = f"s3://{bucket}/{prefix.rstrip('/')}"
    env = child_env(rgw, nginx)
    old, new = sets["raw"]["local"], sets["jpeg"]["local"]  # 5 shards, then 4
    run([PACK, "push", old, url], env)
    r = run([PACK, "push", new, url], env, check=False)
    assert r.returncode == 2 and "holds another dataset" in r.stderr and "--force" in r.stderr
    assert "rerun" not in r.stderr, r.stderr  # a rerun would meet the same dataset
    assert run([PACK, "verify", url], env).returncode == 0  # untouched
    # --force, held on its first shard's upload: the old manifest is gone by then.
    proxied.set(match=f"PUT+/{bucket}/{prefix}shard-00000.sks", hold=1.0)
    p = push(new, url, child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url), "--force")
    wait_for("the first shard's upload held", lambda: proxied.stats()["hold"] >= 1)
    assert "manifest.json" not in keys(client, bucket, prefix)
    kill(p)
    proxied.set(hold=0, match="")
    r = run([PACK, "push", new, url, "--force"], env)
    assert "; 1 stale shards removed" in r.stdout, r.stdout
    shards = sorted(p.name for p in pathlib.Path(new).glob("shard-*.sks"))
    assert keys(client, bucket, prefix) == sorted(shards + ["manifest.json"])
    assert run([PACK, "verify", url], env).returncode == 0


def test_stage_from_s3_verifies_and_resumes_after_a_kill(datasets, rgw, nginx, proxied, tmp_path):
    sets, _ = datasets
    dest = tmp_path / "staged"
    stage = [str(ROOT / "slurm" / "stage.sh"), sets["jpeg"]["s3"], str(dest), "--jobs", "1"]
    env = child_env(rgw, nginx, SHARDKIT_PACK=PACK, AWS_ENDPOINT_URL=proxied.url)
    proxied.set(latency_ms=300)
    p = subprocess.Popen(stage, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    wait_for("a staged shard", lambda: (dest / "shard-00000.sks").exists())
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=HANG)
    assert not (dest / "manifest.json").exists()
    proxied.set(latency_ms=0)
    r = run(stage, env)
    intact = re.search(r"(\d+) already intact", r.stdout)
    assert intact and int(intact.group(1)) >= 1 and "(verified)" in r.stdout, r.stdout
    assert not any(dest.glob(".*.staging.*"))
    assert run([PACK, "verify", dest], env).returncode == 0


# An epoch through the node cache: its digest, and the cache's size at the end.
EPOCH = textwrap.dedent("""
    import hashlib, os, sys, shardkit
    url, cache, limit, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    opts = dict(batch_size=16, transform="none", size=32, rank=rank, world_size=world, seed=9,
                shuffle="full", workers=2)
    if cache:
        opts.update(cache_dir=cache, cache_limit=limit)
    h = hashlib.sha256()
    for x, y in shardkit.Loader(url, **opts):
        h.update(x.numpy().tobytes() + y.numpy().tobytes())
    print(h.hexdigest())
""")


def epoch(url, env, cache="", limit=0, rank=0, world=1):
    return subprocess.Popen(["/usr/bin/python3", "-c", EPOCH, url, str(cache), str(limit), str(rank),
                             str(world)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def digest(p):
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == 0, err
    return out.strip()


def cache_bytes(d):
    return sum(f.stat().st_blocks * 512 for f in pathlib.Path(d).iterdir()
               if f.suffix in (".data", ".map"))


def test_ranks_and_jobs_sharing_a_cache_download_each_chunk_once(binding, datasets, rgw, nginx, proxied,
                                                                 tmp_path):
    sets, _ = datasets
    local, url = sets["jpeg"]["local"], sets["jpeg"]["s3"]
    size = sum(f.stat().st_size for f in pathlib.Path(local).glob("shard-*.sks"))
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url)
    want = [digest(epoch(local, env, rank=r, world=2)) for r in (0, 1)]
    cache = tmp_path / "cache"
    proxied.control("reset_stats")
    ranks = [epoch(url, env, cache, rank=r, world=2) for r in (0, 1)]  # one job, two ranks
    assert [digest(p) for p in ranks] == want
    first = proxied.stats()["bytes_down"]
    assert size <= first < 1.25 * size, (first, size)  # every byte about once, not once per rank
    ranks = [epoch(url, env, cache, rank=r, world=2) for r in (0, 1)]  # the next job
    assert [digest(p) for p in ranks] == want
    assert proxied.stats()["bytes_down"] - first < 0.05 * size  # opens only


def test_stats_count_the_node_caches_hits_and_misses(binding, datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    script = textwrap.dedent("""
        import sys, shardkit
        url, cache = sys.argv[1], sys.argv[2]
        counts = []
        for _ in range(2):  # a job, then the next job on the node
            loader = shardkit.Loader(url, batch_size=16, transform="none", size=32, seed=9,
                                     shuffle="full", workers=2, cache_dir=cache, cache_limit="200G")
            for _ in loader:
                pass
            s = loader.stats()
            counts.append((s["cache_hits"], s["cache_misses"], s["storage_requests"]))
            del loader
        print(counts)
        (h1, m1, r1), (h2, m2, r2) = counts
        assert m1 > 0 and h2 > 0 and m2 == 0 and r2 < r1, counts
    """)
    r = run(["/usr/bin/python3", "-c", script, sets["raw"]["s3"], tmp_path / "cache"],
            child_env(rgw, nginx), check=False)
    assert r.returncode == 0, r.stderr[-2000:]


def test_one_object_on_two_endpoints_is_two_cache_entries(binding, datasets, rgw, nginx, tmp_path):
    """The same s3://bucket/key through another endpoint (here radosgw's
    second gateway, the same objects) is another object to the cache."""
    sets, _ = datasets
    script = textwrap.dedent("""
        import sys, shardkit
        loader = shardkit.Loader(sys.argv[1], batch_size=16, transform="none", size=32,
                                 workers=1, cache_dir=sys.argv[2])
        for _ in loader:
            pass
        s = loader.stats()
        print(s["cache_hits"], s["cache_misses"])
    """)
    counts = []
    for endpoint in (rgw["AWS_ENDPOINT_URL"], rgw["SHARDKIT_RGW_STS_URL"], rgw["AWS_ENDPOINT_URL"]):
        r = run(["/usr/bin/python3", "-c", script, sets["raw"]["s3"], tmp_path / "cache"],
                child_env(rgw, nginx, AWS_ENDPOINT_URL=endpoint))
        counts.append(tuple(int(x) for x in r.stdout.split()))
    # The other endpoint fetches every chunk again; the first one's, again, none.
    assert counts[0][1] > 0 and counts[1][1] == counts[0][1] and counts[2][1] == 0, counts


def test_the_cache_limit_holds_under_a_full_shuffle(binding, datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    local, url = sets["jpeg"]["local"], sets["jpeg"]["s3"]
    shards = list(pathlib.Path(local).glob("shard-*.sks"))
    size, largest = sum(f.stat().st_size for f in shards), max(f.stat().st_size for f in shards)
    env = child_env(rgw, nginx)
    cache = tmp_path / "cache"
    want = digest(epoch(local, env))
    for _ in range(2):  # the second epoch reads what stayed, fetches the rest
        assert digest(epoch(url, env, cache, limit=size // 2)) == want
        assert cache_bytes(cache) <= size // 2 + largest


def test_a_cache_file_cut_short_by_a_kill_is_fetched_again(binding, datasets, rgw, nginx, proxied, tmp_path):
    sets, _ = datasets
    local, url = sets["raw"]["local"], sets["raw"]["s3"]
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=proxied.url)
    cache = tmp_path / "cache"
    want = digest(epoch(local, env))
    assert digest(epoch(url, env, cache)) == want
    data = sorted(pathlib.Path(cache).glob("*.data"), key=lambda f: f.stat().st_size)[-1]
    whole = data.stat().st_size
    os.truncate(data, whole // 3)
    proxied.control("reset_stats")
    assert digest(epoch(url, env, cache)) == want
    chunk = 1 << 20
    assert proxied.stats()["bytes_down"] >= whole - whole // 3 - chunk  # what was cut, again


HOLD = textwrap.dedent("""
    import hashlib, sys, shardkit
    url, cache = sys.argv[1], sys.argv[2]
    loader = shardkit.Loader(url, batch_size=16, transform="none", size=32, rank=0, world_size=1,
                             seed=9, shuffle="full", workers=2, cache_dir=cache, cache_limit=1)
    h = hashlib.sha256()
    it = iter(loader)
    for _ in range(3):
        x, y = next(it)
        h.update(x.numpy().tobytes() + y.numpy().tobytes())
    print("holding", flush=True)
    sys.stdin.readline()
    for x, y in it:
        h.update(x.numpy().tobytes() + y.numpy().tobytes())
    print(h.hexdigest(), flush=True)
""")


def test_a_reader_keeps_what_it_has_open_when_another_evicts(binding, datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    env = child_env(rgw, nginx)
    cache = tmp_path / "cache"
    want = digest(epoch(sets["jpeg"]["local"], env))
    # A full cache (everything of the jpeg set), then a reader in its middle.
    digest(epoch(sets["jpeg"]["s3"], env, cache))
    held = subprocess.Popen(["/usr/bin/python3", "-c", HOLD, sets["jpeg"]["s3"], str(cache)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert held.stdout.readline().strip() == "holding", held.stderr.read()
        jpeg = sorted(f.name for f in pathlib.Path(cache).iterdir())
        # Another job, another dataset, a limit of almost nothing: it evicts
        # what nobody has open (nothing here), and reads uncached.
        assert digest(epoch(sets["raw"]["s3"], env, cache, limit=1)) == digest(
            epoch(sets["raw"]["local"], env))
        assert all((cache / name).exists() for name in jpeg)
        held.stdin.write("go\n")
        held.stdin.flush()
        out, err = held.communicate(timeout=HANG)
    finally:
        held.kill()
    assert out.strip() == want, err
    digest(epoch(sets["raw"]["s3"], env, cache, limit=1))  # now nothing is open: the jpeg set goes
    assert not any((cache / name).exists() for name in jpeg)
