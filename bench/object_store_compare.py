#!/usr/bin/python3
"""Datasets in object storage, side by side in one run (issue 45's targets):

  shardkit, local disk  the dataset read cold (evicted from the page cache)
  shardkit, s3://       the same shards read from radosgw through fault_proxy,
                        which adds LATENCY_MS to every request (default options)
  shardkit, http://     the same shards from nginx through a second fault_proxy
                        with the same latency: a server that costs little CPU
  download, then read   the MosaicML/LitData way: every shard downloaded first
                        (8 at a time, through the same proxy), then read locally:
                        time to the first batch and to the end of the epoch
  DataLoader + boto3    one object per JPEG, a get_object per image in the
                        DataLoader's workers (bench/pytorch_loader.py s3objects)

for raw records (240,000 28x28 images, 188 MB: Fashion-MNIST's training set as
shardkit-augment bigmnist makes it, 2 versions x 2 copies, zstd blocks; within
the default 256 MiB block cache, so that a full shuffle decompresses each block
once, as `auto` would choose it) and JPEG
records (real photographs, the train transform at 224 px), 1 and 2 workers,
full and block-local shuffles. Then the node cache (--cache-dir): a first and a
second epoch, with no limit and with half the dataset, beside local disk and
s3:// without it; `shardkit-pack push` of an ImageNet-shaped set (--push-records
small JPEGs) through the same proxy beside boto3's upload of the same files
(the link's rate), and a push killed halfway then rerun; and ten epochs of one
loader from s3:// with its resident memory and open connections after each. Starts its own radosgw,
nginx (tests/servers/) and fault_proxies, stops them by PID at the end.

On one machine the servers share the CPU with the loader (radosgw spends about
a core per 200 MB/s here). --pin puts the servers and proxies on the last
core and every loader (local and remote alike) on the others, as if the
storage were another machine.

usage: bench/object_store_compare.py [OUT] [--latency-ms 10] [--per-class 100]
         [--workers 1,2] [--repeat 2] [--epochs 10] [--pin] [--push-records 128100]
         [--sections reads,cache,push,growth]
Writes OUT/object_store.md, .csv and .svg (default OUT: out/object_store).
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import selectors
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("SHARDKIT_BUILD", ROOT / "build"))
PACK = BUILD / "tools" / "pack" / "shardkit-pack"
BENCH = BUILD / "tools" / "bench" / "shardkit-bench"
PROXY = BUILD / "tests" / "fault_proxy"
AUGMENT = BUILD / "tools" / "augment" / "shardkit-augment"
PY = "/usr/bin/python3"
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_env(path):
    env = {}
    for line in pathlib.Path(path).read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip('"')
    return env


def start_proxy(upstream, latency_ms):
    proxy = subprocess.Popen([str(PROXY), "--upstream", upstream, "--latency_ms", str(latency_ms)],
                             stdout=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(proxy.stdout, selectors.EVENT_READ)
        line = proxy.stdout.readline() if sel.select(timeout=60) else ""
    if not line.startswith("listening "):
        proxy.kill()
        sys.exit("object_store_compare: fault_proxy did not start")
    return proxy, "http://127.0.0.1:" + line.split()[1]


class Servers:
    """radosgw and nginx (serving WWW), each with a fault_proxy adding
    LATENCY_MS in front of it."""

    def __init__(self, state, www, latency_ms):
        self.state = state
        servers = ROOT / "tests" / "servers"
        subprocess.run([str(servers / "rgw.sh"), "start", str(state / "rgw")], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([str(servers / "nginx.sh"), "start", str(state / "nginx"), str(www)], check=True,
                       stdout=subprocess.DEVNULL)
        self.rgw = parse_env(state / "rgw" / "env")
        nginx = parse_env(state / "nginx" / "env")
        self.proxies = []
        for upstream in (self.rgw["AWS_ENDPOINT_URL"], nginx["SHARDKIT_TEST_HTTP_URL"]):
            self.proxies.append(start_proxy(upstream.removeprefix("http://"), latency_ms))
        self.proxy_url, self.http_url = self.proxies[0][1], self.proxies[1][1]
        self.pids = [int(p) for p in self.rgw["SHARDKIT_RGW_PIDS"].split()] + \
            [int(nginx["SHARDKIT_NGINX_PID"])] + [p.pid for p, _ in self.proxies]

    def pin(self, cpu):
        """The servers' and proxies' threads (and nginx's workers) on CPU."""
        for pid in self.pids:
            subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], stdout=subprocess.DEVNULL)
            for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                        text=True).stdout.split():
                subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), child], stdout=subprocess.DEVNULL)

    def env(self, through_proxy=True):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({k: v for k, v in self.rgw.items() if k.startswith("AWS_")})
        if through_proxy:
            env["AWS_ENDPOINT_URL"] = self.proxy_url
        env["PYTHONPATH"] = str(BUILD / "python")
        return env

    def stop(self):
        for proxy, _ in self.proxies:
            proxy.terminate()
            proxy.wait(timeout=60)
        servers = ROOT / "tests" / "servers"
        subprocess.run([str(servers / "rgw.sh"), "stop", str(self.state / "rgw")], stdout=subprocess.DEVNULL)
        subprocess.run([str(servers / "nginx.sh"), "stop", str(self.state / "nginx")],
                       stdout=subprocess.DEVNULL)


def s3_client(env):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env["AWS_REGION"],
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


def upload(client, bucket, local, prefix):
    files = sorted(p for p in pathlib.Path(local).rglob("*") if p.is_file())
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda f: client.upload_file(str(f), bucket,
                                                   f"{prefix}/{f.relative_to(local)}"), files))


def make_data(out, per_class):
    data = out / "data"
    raw, tree, jpeg = data / "raw", data / "tree", data / "jpeg"
    if not (raw / "manifest.json").exists():
        subprocess.run([str(AUGMENT), "bigmnist", "--src", str(FASHION), str(raw), "--versions", "2",
                        "--copies", "2", "--distinct-copies", "--shard-size", str(64 << 20)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not (jpeg / "manifest.json").exists():
        subprocess.run([PY, str(ROOT / "scripts" / "make_jpeg_set.py"), str(tree), "--per-class",
                        str(per_class)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([str(PACK), "imagenet", str(tree), str(jpeg), "--shard-size", str(32 << 20)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"raw": raw, "jpeg": jpeg}, tree


# Where loaders run: all cores, or (--pin) all but the servers' last one.
LOADER_CPUS = []


def bench(path, env, kind, workers, shuffle, batches, repeat, extra=(), tool=None):
    """shardkit-bench loader --cold: one JSON row per worker count (tool: another
    build's shardkit-bench, for --against)."""
    transform = ["--transform", "train", "--size", "224", "--batch", "64"] if kind == "jpeg" else \
        ["--transform", "none", "--batch", "256"]
    cmd = [*LOADER_CPUS, str(tool or BENCH), "loader", str(path), "--workers", workers, "--shuffle", shuffle,
           "--cold", "--batches", str(batches), "--repeat", str(repeat), "--json", *transform, *extra]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"object_store_compare: {' '.join(cmd)}: {r.stderr}")
    return json.loads(r.stdout)


def download_then_read(client, bucket, prefix, dest, env, kind, workers, batches):
    """Every shard downloaded (8 at a time), then the epoch read locally."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    t0 = time.perf_counter()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.download_file(bucket, k, str(dest / k.split("/")[-1])), keys))
    download = time.perf_counter() - t0
    row = bench(dest, env, kind, workers, "full", batches, 1)[0]
    return download, row


def dataloader_boto3(url, env, workers, batches, repeat):
    cmd = [*LOADER_CPUS, PY, str(ROOT / "bench" / "pytorch_loader.py"), "s3objects", url, "--workers", workers,
           "--batch", "64", "--batches", str(batches), "--repeat", str(repeat)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"object_store_compare: {' '.join(cmd)}: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


GROWTH = r"""
import os, sys, shardkit
url, epochs = sys.argv[1], int(sys.argv[2])
loader = shardkit.Loader(url, batch_size=256, transform="none", workers=2, rank=0, world_size=1)
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
def sockets():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink("/proc/self/fd/" + fd).startswith("socket:")
        except OSError:
            pass
    return n
for e in range(epochs):
    loader.set_epoch(e)
    for x, y in loader:
        pass
    print(e, rss(), sockets(), flush=True)
"""


def growth(url, env, epochs):
    r = subprocess.run([*LOADER_CPUS, PY, "-c", GROWTH, url, str(epochs)], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit("object_store_compare: growth run failed: " + r.stderr)
    return [tuple(int(v) for v in line.split()) for line in r.stdout.splitlines()]


def svg(rows, path):
    """Bars: images/s of each way of reading, per configuration."""
    groups = [r for r in rows if r["what"] in ("local", "s3", "http", "download", "boto3")]
    if not groups:
        return
    labels = sorted({r["config"] for r in groups}, key=lambda c: [r["config"] for r in groups].index(c))
    ways = ["local", "s3", "http", "download", "boto3"]
    colors = {"local": "#4c72b0", "s3": "#dd8452", "http": "#8172b3", "download": "#55a868",
              "boto3": "#c44e52"}
    top = max(r["images_per_sec"] for r in groups) * 1.1
    w, h, left, bottom = 60 + 90 * len(labels), 360, 60, 300
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 140}" height="{h + 60}" '
           'font-family="sans-serif" font-size="11">']
    out.append(f'<text x="{left}" y="16" font-size="13">images/s, cold, per way of reading '
               '(higher is better)</text>')
    for i, c in enumerate(labels):
        x0 = left + 90 * i
        for j, way in enumerate(ways):
            v = next((r["images_per_sec"] for r in groups if r["config"] == c and r["what"] == way), None)
            if v is None:
                continue
            bh = (bottom - 30) * v / top
            out.append(f'<rect x="{x0 + 18 * j}" y="{bottom - bh:.1f}" width="16" height="{bh:.1f}" '
                       f'fill="{colors[way]}"/>')
        out.append(f'<text x="{x0}" y="{bottom + 14}" transform="rotate(30 {x0} {bottom + 14})">{c}</text>')
    for j, way in enumerate(ways):
        out.append(f'<rect x="{w}" y="{40 + 18 * j}" width="12" height="12" fill="{colors[way]}"/>'
                   f'<text x="{w + 16}" y="{50 + 18 * j}">{way}</text>')
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{w}" y2="{bottom}" stroke="black"/>')
    out.append("</svg>")
    path.write_text("\n".join(out))


def measure_reads(rows, sets, servers, bucket, args):
    env, size = servers.env(), {}
    for kind, d in sets.items():
        info = json.loads(subprocess.run([str(PACK), "inspect", str(d), "--json"], capture_output=True,
                                         text=True, check=True).stdout)
        records, size[kind] = info["records"], info["bytes"]
        batch = 64 if kind == "jpeg" else 256
        batches = records // batch  # an epoch
        for shuffle in ("full", "block"):
            config = f"{kind} {shuffle}"
            log("measuring", config)
            local = bench(d, env, kind, args.workers, shuffle, batches, args.repeat)
            remote = bench(f"s3://{bucket}/{kind}", env, kind, args.workers, shuffle, batches, args.repeat)
            web = bench(f"{servers.http_url}/{kind}", env, kind, args.workers, shuffle, batches, args.repeat)
            for lr, rr, hr in zip(local, remote, web):
                c = f"{config} w{lr['workers']}"
                rows.append(dict(what="local", config=c, **pick(lr)))
                for what, r in (("s3", rr), ("http", hr)):
                    rows.append(dict(what=what, config=c, **pick(r), ratio=r["images_per_sec"] /
                                     lr["images_per_sec"], fetched=r["storage_bytes"] / size[kind]))
        if kind == "jpeg":  # a GET per record in a full shuffle: what can the servers answer?
            log("server ceilings")
            objects = {f.name: f.stat().st_size for f in pathlib.Path(d).glob("shard-*.sks")}
            client = s3_client(servers.env(through_proxy=False))
            for name in objects:  # anonymous reads, for curl
                client.put_object_acl(Bucket=bucket, Key=f"{kind}/{name}", ACL="public-read")
            mean = size[kind] // records
            for what, base in (("s3", f"{servers.proxy_url}/{bucket}/{kind}"),
                               ("http", f"{servers.http_url}/{kind}")):
                rows.append(dict(what="ceiling", config=what, record_bytes=mean,
                                 gets_per_sec=server_ceiling(base, objects, mean)))
        log("download, then read", kind)
        secs, row = download_then_read(s3_client(env), bucket, kind, args.out / "downloaded", env, kind,
                                       args.workers.split(",")[-1], batches)
        rows.append(dict(what="download", config=f"{kind} full w{row['workers']}", **pick(row),
                         download_seconds=secs))
    log("DataLoader + boto3")
    n = sum(1 for _ in args.tree.rglob("*.JPEG"))
    for r in dataloader_boto3(f"s3://{bucket}/objects", env, args.workers, n // 64, 1):
        rows.append(dict(what="boto3", config=f"jpeg full w{r['workers']}",
                         images_per_sec=r["images_per_sec"], seconds=r["seconds"]))


def server_ceiling(url, objects, record_bytes, n=3000, depth=128, seed=3):
    """The most ranged GETs a second the server behind URL answers, as a
    client that costs almost nothing asks for them: curl --parallel on the
    loaders' cores, DEPTH in flight, N GETs of RECORD_BYTES at random offsets
    of OBJECTS ({name: size}), unsigned. The s3:// and http:// rates of
    stored records (a GET each) are read against it: a loader at the ceiling
    is held by the server, not by itself."""
    import random
    rng = random.Random(seed)
    names = sorted(objects)
    lines = []
    for _ in range(n):
        name = rng.choice(names)
        start = rng.randrange(0, max(1, objects[name] - record_bytes))
        lines += [f'url = "{url}/{name}"', f'range = "{start}-{start + record_bytes - 1}"',
                  'output = "/dev/null"', "next"]
    cfg = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"ceiling-{os.getpid()}.curl"
    cfg.write_text("\n".join(lines[:-1]) + "\n")
    try:
        t0 = time.perf_counter()
        subprocess.run([*LOADER_CPUS, "curl", "-s", "--fail", "--parallel", "--parallel-max", str(depth),
                        "--config", str(cfg)], check=True)
        return n / (time.perf_counter() - t0)
    finally:
        cfg.unlink()


def evict_dir(d):
    """The cache's files out of the page cache: a cold second epoch."""
    for f in pathlib.Path(d).iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def measure_cache(rows, sets, servers, bucket, args):
    """Epochs 1 and 2 through the node cache (cold: its files evicted before
    epoch 2), unlimited and at half the dataset, beside local disk and s3://
    without a cache, all cold, for 2 workers."""
    env = servers.env()
    w = args.workers.split(",")[-1]
    for kind, d in sets.items():
        info = json.loads(subprocess.run([str(PACK), "inspect", str(d), "--json"], capture_output=True,
                                         text=True, check=True).stdout)
        size = info["bytes"]
        largest = max(f.stat().st_size for f in pathlib.Path(d).glob("shard-*.sks"))
        batches = info["records"] // (64 if kind == "jpeg" else 256)
        for shuffle in ("full", "block"):
            config = f"{kind} {shuffle} w{w}"
            log("cache", config)
            local = bench(d, env, kind, w, shuffle, batches, 1)[0]
            plain = bench(f"s3://{bucket}/{kind}", env, kind, w, shuffle, batches, 1)[0]
            rows.append(dict(what="cache", config=config, way="local disk", **pick(local)))
            rows.append(dict(what="cache", config=config, way="s3:// without a cache", **pick(plain)))
            for limit, name in ((0, "no limit"), (size // 2, "half the dataset")):
                cache = args.out / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                for epoch in (1, 2):
                    if epoch == 2:
                        evict_dir(cache)
                    r = bench(f"s3://{bucket}/{kind}", env, kind, w, shuffle, batches, 1,
                              ["--cache-dir", str(cache), "--cache-limit", str(limit)])[0]
                    used = sum(f.stat().st_blocks * 512 for f in cache.iterdir())
                    rows.append(dict(what="cache", config=config, way=f"s3:// cache {name}, epoch {epoch}",
                                     **pick(r), cache_bytes=used, limit=limit, largest=largest))
                shutil.rmtree(cache, ignore_errors=True)


def measure_against(rows, sets, servers, bucket, args):
    """This build's loader and another build's (--against: the commit a change
    started from), alternating in each of --repeat rounds, over the same
    s3:// datasets through the same proxy, cold, and the node cache's second
    epoch: a change to the storage code must not make either slower."""
    env = servers.env()
    old_bench = pathlib.Path(args.against) / "tools" / "bench" / "shardkit-bench"
    if not old_bench.exists():
        sys.exit(f"object_store_compare: --against {args.against}: no tools/bench/shardkit-bench there")
    for kind, d in sets.items():
        info = json.loads(subprocess.run([str(PACK), "inspect", str(d), "--json"], capture_output=True,
                                         text=True, check=True).stdout)
        batches = info["records"] // (64 if kind == "jpeg" else 256)
        for shuffle in ("block", "full"):
            for w in args.workers.split(","):
                config = f"{kind} {shuffle} w{w}"
                for r in range(args.repeat):
                    sides = [("old", old_bench), ("new", BENCH)]
                    for side, tool in (sides if r % 2 == 0 else sides[::-1]):
                        log("against", config, side, f"round {r + 1}")
                        got = bench(f"s3://{bucket}/{kind}", env, kind, w, shuffle, batches, 1, tool=tool)[0]
                        rows.append(dict(what="against", config=config, way=side, round=r, **pick(got)))
                        cache = args.out / f"cache-{side}"
                        shutil.rmtree(cache, ignore_errors=True)
                        for epoch in (1, 2):
                            if epoch == 2:
                                evict_dir(cache)
                            got = bench(f"s3://{bucket}/{kind}", env, kind, w, shuffle, batches, 1,
                                        ["--cache-dir", str(cache)], tool=tool)[0]
                        shutil.rmtree(cache, ignore_errors=True)
                        rows.append(dict(what="against", config=config + " cache epoch 2", way=side, round=r,
                                         **pick(got)))


def against_table(rows, args):
    """Median img/s per side and new / old, from measure_against's rows."""
    import statistics
    ours = [r for r in rows if r["what"] == "against"]
    if not ours:
        return []
    md = ["", f"This build against {args.against} (old), alternating in each of {args.repeat} rounds, "
          "s3:// through the proxy, cold; 'cache epoch 2' is the node cache's second epoch "
          "(its files evicted from the page cache first). Median img/s.", "",
          "| records, shuffle, workers | old | new | new / old | old rounds | new rounds |",
          "|---|---:|---:|---:|---|---|"]
    for config in dict.fromkeys(r["config"] for r in ours):
        v = {side: [r["images_per_sec"] for r in ours if r["config"] == config and r["way"] == side]
             for side in ("old", "new")}
        o, n = statistics.median(v["old"]), statistics.median(v["new"])
        md.append(f"| {config} | {o:.0f} | {n:.0f} | {n / o:.2f} | {', '.join(f'{x:.0f}' for x in v['old'])} "
                  f"| {', '.join(f'{x:.0f}' for x in v['new'])} |")
    return md


def make_push_set(out, records):
    """An ImageNet-shaped set of `records` small JPEGs (1000 classes), packed."""
    pool, tree, packed = out / "push-pool", out / "push-tree", out / "push-set"
    if (packed / "manifest.json").exists():
        return packed
    if not pool.exists():
        subprocess.run([PY, str(ROOT / "scripts" / "make_jpeg_set.py"), str(pool), "--per-class", "143",
                        "--long-side", "160", "--quality", "85"], check=True, stdout=subprocess.DEVNULL)
    files = sorted(p for p in pool.rglob("*.JPEG"))
    per_class = max(1, records // 1000)
    shutil.rmtree(tree, ignore_errors=True)
    k = 0
    for c in range(1000):
        cdir = tree / ("n%08d" % c)
        cdir.mkdir(parents=True)
        for i in range(per_class):
            os.link(files[k % len(files)], cdir / ("%d.JPEG" % i))
            k += 1
    subprocess.run([str(PACK), "imagenet", str(tree), str(packed)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(tree)
    return packed


def measure_push(rows, servers, bucket, args):
    """push through the proxy beside boto3's upload of the same files; a push
    killed halfway and rerun."""
    packed = make_push_set(args.out, args.push_records)
    env, client = servers.env(), s3_client(servers.env())
    size = sum(f.stat().st_size for f in packed.iterdir() if f.is_file())
    log("push", packed, f"{size / 1e9:.2f} GB")
    t0 = time.perf_counter()
    upload(client, bucket, packed, "boto3-push")
    rows.append(dict(what="push", way="boto3 upload_file, 16 at a time (the link's rate)", bytes=size,
                     seconds=time.perf_counter() - t0))
    t0 = time.perf_counter()
    subprocess.run([str(PACK), "push", str(packed), f"s3://{bucket}/pushed"], env=env, check=True,
                   capture_output=True)
    rows.append(dict(what="push", way="shardkit-pack push", bytes=size, seconds=time.perf_counter() - t0))
    # Killed once half the shards are there, then rerun.
    shards = len(list(packed.glob("shard-*.sks")))
    p = subprocess.Popen([str(PACK), "push", str(packed), f"s3://{bucket}/killed"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None:
        listed = client.list_objects_v2(Bucket=bucket, Prefix="killed/").get("KeyCount", 0)
        if listed >= shards // 2:
            p.kill()
            break
        time.sleep(0.05)
    p.wait()
    t0 = time.perf_counter()
    r = subprocess.run([str(PACK), "push", str(packed), f"s3://{bucket}/killed"], env=env, check=True,
                       capture_output=True, text=True)
    m = re.search(r"uploaded (\d+) of (\d+) shards \(([^)]*)\), (\d+) already there", r.stdout)
    rows.append(dict(what="push", way=f"rerun after a kill: {m.group(1)} of {m.group(2)} shards sent "
                     f"({m.group(3)}), {m.group(4)} kept", bytes=size, seconds=time.perf_counter() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=str(ROOT / "out" / "object_store"))
    ap.add_argument("--latency-ms", type=float, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--push-records", type=int, default=128100)
    ap.add_argument("--sections", default="reads,cache,push,growth",
                    help="reads, cache, push, growth; against (with --against)")
    ap.add_argument("--against", metavar="BUILD",
                    help="another build folder (e.g. out/commits/OLD/build): its loader beside this one's")
    ap.add_argument("--pin", action="store_true",
                    help="servers on the last core, loaders on the others (as if storage were remote)")
    args = ap.parse_args()
    args.out = pathlib.Path(args.out).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    for tool in (PACK, BENCH, PROXY, AUGMENT):
        if not tool.exists():
            sys.exit(f"object_store_compare: build first: {tool} is missing")
    sets, args.tree = make_data(args.out, args.per_class)
    servers = Servers(args.out / "servers", args.out / "data", args.latency_ms)
    if args.pin:
        cpus = os.cpu_count()
        servers.pin(cpus - 1)
        LOADER_CPUS[:] = ["taskset", "-c", "0" if cpus == 2 else f"0-{cpus - 2}"]
    rows, sections = [], args.sections.split(",")
    try:
        client = s3_client(servers.env(through_proxy=False))
        bucket = "bench"
        client.create_bucket(Bucket=bucket)
        log("uploading")
        for kind, d in sets.items():
            upload(client, bucket, d, kind)
        upload(client, bucket, args.tree, "objects")
        if "reads" in sections:
            measure_reads(rows, sets, servers, bucket, args)
        if "cache" in sections:
            measure_cache(rows, sets, servers, bucket, args)
        if "against" in sections or args.against:
            if not args.against:
                sys.exit("object_store_compare: the against section needs --against BUILD")
            measure_against(rows, sets, servers, bucket, args)
        if "push" in sections:
            measure_push(rows, servers, bucket, args)
        if "growth" in sections:
            log("ten epochs")
            for e, rss, sockets in growth(f"s3://{bucket}/jpeg", servers.env(), args.epochs):
                rows.append(dict(what="growth", config=f"epoch {e}", rss=rss, sockets=sockets))
    finally:
        servers.stop()
    report(rows, args.out, args)


def pick(r):
    keys = ("workers", "images_per_sec", "seconds", "open_seconds", "first_batch_seconds",
            "reads_in_flight_mean", "read_latency_ms", "peak_rss_bytes")
    return {k: r.get(k, 0) for k in keys}


def report(rows, out, args):
    import csv
    with open(out / "object_store.csv", "w", newline="") as f:
        fields = sorted({k for r in rows for k in r})
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    svg(rows, out / "object_store.svg")
    where = ("servers and proxies on the last core, loaders on the others" if args.pin else
             "servers, proxies and loaders sharing every core")
    md = [f"Cold reads of a whole epoch; s3:// is radosgw, http:// is nginx, each behind fault_proxy "
          f"adding {args.latency_ms:g} ms to every request; default options; {where}. images/s, and "
          "each remote rate as a fraction of local disk's. Fetched: bytes received per byte of the "
          "dataset (one epoch reads each record once).", "",
          "| records, shuffle, workers | local disk | s3:// | s3 / local | http:// | http / local "
          "| s3 open + first batch s | s3 fetched | s3 reads in flight | s3 ms per read |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["what"] != "s3":
            continue
        lo = next(x for x in rows if x["what"] == "local" and x["config"] == r["config"])
        web = next(x for x in rows if x["what"] == "http" and x["config"] == r["config"])
        md.append(f"| {r['config']} | {lo['images_per_sec']:.0f} | {r['images_per_sec']:.0f} | "
                  f"{r['ratio']:.2f}x | {web['images_per_sec']:.0f} | {web['ratio']:.2f}x | "
                  f"{r['open_seconds']:.2f} + {r['first_batch_seconds']:.2f} | {r['fetched']:.2f} | "
                  f"{r['reads_in_flight_mean']:.0f} | {r['read_latency_ms']:.1f} |")
    ceilings = {r["config"]: r for r in rows if r["what"] == "ceiling"}
    if ceilings:
        full = {r["what"]: r for r in rows if r["what"] in ("s3", "http") and r["config"].startswith("jpeg full")
                and r["workers"] == max(x["workers"] for x in rows if x["what"] == "s3")}
        md += ["", "A full shuffle of stored records is a GET per record: the most GETs a second each "
               "server answered (through its proxy) to a client that costs almost nothing (curl --parallel, "
               f"128 in flight, {next(iter(ceilings.values()))['record_bytes'] / 1e3:.0f} KB ranges at random "
               "offsets, on the loaders' cores), beside the loader's rate there:", "",
               "| server | its ceiling, GETs/s | shardkit, jpeg full, images/s | shardkit / ceiling |",
               "|---|---:|---:|---:|"]
        for what, name in (("s3", "radosgw (s3://)"), ("http", "nginx (http://)")):
            if what in ceilings and what in full:
                c, r = ceilings[what]["gets_per_sec"], full[what]["images_per_sec"]
                md.append(f"| {name} | {c:.0f} | {r:.0f} | {r / c:.2f} |")
    md += ["", "The ways people read object storage today, the same epoch:", "",
           "| way | records | workers | images/s | first batch s | epoch s |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["what"] == "s3" and "full" in r["config"]:
            md.append(f"| shardkit from s3:// | {r['config'].split()[0]} | {r['workers']} | "
                      f"{r['images_per_sec']:.0f} | {r['open_seconds'] + r['first_batch_seconds']:.2f} | "
                      f"{r['open_seconds'] + r['seconds']:.1f} |")
        if r["what"] == "download":
            md.append(f"| download every shard, then read | {r['config'].split()[0]} | {r['workers']} | "
                      f"{r['images_per_sec']:.0f} | "
                      f"{r['download_seconds'] + r['open_seconds'] + r['first_batch_seconds']:.2f} | "
                      f"{r['download_seconds'] + r['open_seconds'] + r['seconds']:.1f} |")
        if r["what"] == "boto3":
            md.append(f"| DataLoader, a get_object per JPEG | jpeg | {r['config'].split()[-1][1:]} | "
                      f"{r['images_per_sec']:.0f} | - | {r['seconds']:.1f} |")
    cache_rows = [r for r in rows if r["what"] == "cache"]
    if cache_rows:
        md += ["", "The node cache (`--cache-dir`): cold epochs, 2 workers; epoch 2 after its files left the "
               "page cache. images/s, as a fraction of local disk and of s3:// without a cache; the cache's "
               "size after the epoch (its limit and the largest shard).", "",
               "| records, shuffle, workers | way | images/s | / local | / s3:// | cache MB (limit; largest shard) |",
               "|---|---|---:|---:|---:|---:|"]
        for r in cache_rows:
            lo = next(x for x in cache_rows if x["config"] == r["config"] and x["way"] == "local disk")
            pl = next(x for x in cache_rows if x["config"] == r["config"] and x["way"].startswith("s3:// without"))
            used = ""
            if "cache_bytes" in r:
                limit = "none" if not r["limit"] else "%.0f" % (r["limit"] / 1e6)
                used = "%.0f (%s; %.0f)" % (r["cache_bytes"] / 1e6, limit, r["largest"] / 1e6)
            md.append(f"| {r['config']} | {r['way']} | {r['images_per_sec']:.0f} | "
                      f"{r['images_per_sec'] / lo['images_per_sec']:.2f}x | "
                      f"{r['images_per_sec'] / pl['images_per_sec']:.2f}x | {used} |")
    push_rows = [r for r in rows if r["what"] == "push"]
    if push_rows:
        md += ["", f"Publishing an ImageNet-shaped set ({args.push_records} small JPEGs, "
               f"{push_rows[0]['bytes'] / 1e9:.2f} GB packed) through the same proxy:", "",
               "| way | seconds | MB/s |", "|---|---:|---:|"]
        for r in push_rows:
            md.append(f"| {r['way']} | {r['seconds']:.1f} | {r['bytes'] / r['seconds'] / 1e6:.0f} |")
    growth_rows = [r for r in rows if r["what"] == "growth"]
    if growth_rows:
        md += ["", "One loader reading s3:// for ten epochs (JPEG records, 2 workers): resident memory "
               "and open sockets after each epoch.", "",
               "| epoch | " + " | ".join(r["config"].split()[1] for r in growth_rows) + " |",
               "|---|" + "---:|" * len(growth_rows),
               "| RSS MB | " + " | ".join(f"{r['rss'] / 1e6:.0f}" for r in growth_rows) + " |",
               "| sockets | " + " | ".join(str(r["sockets"]) for r in growth_rows) + " |"]
    md += against_table(rows, args)
    (out / "object_store.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
