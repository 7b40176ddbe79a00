"""The Python binding: the same batches as the C++ loader, ranks, epochs,
exact resume, leases that keep their memory, corrupt records, the GIL released
while C++ works, and a Writer whose output shardkit-pack verifies."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import tool, shardkit_module

torch = pytest.importorskip("torch")
sk = shardkit_module()


def make_jpegs(root, n=40, seed=0):
    """n small JPEG photos-like images (smooth gradients and noise) in 4 classes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(n):
        w, h = int(rng.integers(60, 160)), int(rng.integers(60, 160))
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 127 // (w + h))], -1)
        img = np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
        d = os.path.join(root, "class%d" % (k % 4))
        os.makedirs(d, exist_ok=True)
        Image.fromarray(img).save(os.path.join(d, "%03d.jpg" % k), quality=90)


@pytest.fixture(scope="module")
def jpeg_ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpeg")
    make_jpegs(str(root / "src"))
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "src"), str(root / "ds"),
                    "--shard-size", "65536"], check=True, capture_output=True)
    return str(root / "ds")


@pytest.fixture(scope="module")
def raw_ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(1)
    records = rng.integers(0, 256, (203, 8, 6, 3), dtype=np.uint8)
    with sk.Writer(str(root / "ds"), kind="raw_u8", shape=(8, 6, 3), classes=[str(c) for c in range(7)],
                   shard_size=1 << 16) as w:
        for i, r in enumerate(records):
            w.add(r, i % 7, key="r%d" % i)
    return str(root / "ds"), records


def read_dump(path):
    with open(path, "rb") as f:
        n, c, h, w = map(int, f.readline().split())
        rows = [f.readline().decode().split(" ", 2) for _ in range(n)]
        pixels = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, c, h, w)
    return [int(r[0]) for r in rows], [int(r[1]) for r in rows], pixels


def epoch_of(loader):
    ids, labels, pixels = [], [], []
    for images, lab, sid, _ in loader.batches():
        ids += sid.tolist()
        labels += lab.tolist()
        pixels.append(images.numpy().copy())
    return ids, labels, np.concatenate(pixels) if pixels else None


@pytest.mark.parametrize("shuffle,transform", [("full", "train"), ("none", "val"), ("block", "train")])
def test_batches_equal_the_cpp_loaders(jpeg_ds, tmp_path, shuffle, transform):
    args = ["--transform", transform, "--size", "48", "--seed", "7", "--shuffle", shuffle, "--batch", "6",
            "--rank", "1", "--world", "2", "--epoch", "3", "--workers", "2"]
    subprocess.run([tool("tests", "loader_dump"), jpeg_ds, str(tmp_path / "dump")] + args, check=True)
    want_ids, want_labels, want_pixels = read_dump(str(tmp_path / "dump"))
    loader = sk.Loader(jpeg_ds, 6, workers=3, transform=transform, size=48, seed=7, shuffle=shuffle,
                       rank=1, world_size=2)
    loader.set_epoch(3)
    ids, labels, pixels = epoch_of(loader)
    assert ids == want_ids
    assert labels == want_labels
    assert np.array_equal(pixels, want_pixels)


def test_iteration_yields_uint8_images_and_int64_labels(jpeg_ds):
    loader = sk.Loader(jpeg_ds, 8, workers=2, size=32, rank=0, world_size=1)
    assert len(loader) == 5 and loader.shape == (3, 32, 32)
    n = 0
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape == (8, 3, 32, 32) and images.is_contiguous()
        assert labels.dtype == torch.int64 and labels.shape == (8,)
        assert 0 <= int(labels.min()) and int(labels.max()) < 4
        n += 1
    assert n == len(loader)
    ds = sk.Dataset(jpeg_ds)
    assert ds.classes == ["class0", "class1", "class2", "class3"] and ds.kind == "jpeg" and len(ds) == 40


def test_nhwc_is_a_channels_last_view_of_the_same_pixels(jpeg_ds):
    a = sk.Loader(jpeg_ds, 8, workers=2, size=40, shuffle="none", transform="val", rank=0, world_size=1)
    b = sk.Loader(jpeg_ds, 8, workers=2, size=40, shuffle="none", transform="val", rank=0, world_size=1,
                  layout="NHWC")
    for (x, _), (y, _) in zip(a, b):
        assert y.shape == x.shape
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(x, y)


def test_two_ranks_are_disjoint_cover_the_dataset_and_have_equal_lengths(raw_ds):
    path, _ = raw_ds
    seen = []
    for rank in range(2):
        loader = sk.Loader(path, 10, transform=None, rank=rank, world_size=2, seed=5)
        ids, _, _ = epoch_of(loader)
        seen.append(ids)
        assert len(loader) == 11  # ceil(203 / 2) = 102 samples, 11 batches
    assert len(seen[0]) == len(seen[1]) == 102
    # One padding sample (the epoch's first position) makes 204 from 203.
    assert set(seen[0]) | set(seen[1]) == set(range(203))
    assert len(set(seen[0]) & set(seen[1])) <= 1


def test_set_epoch_changes_the_order_deterministically(raw_ds):
    path, _ = raw_ds
    loader = sk.Loader(path, 16, transform=None, rank=0, world_size=1, seed=2, shuffle="full")
    orders = {}
    for epoch in (0, 1, 0):
        loader.set_epoch(epoch)
        orders.setdefault(epoch, []).append(epoch_of(loader)[0])
    assert orders[0][0] == orders[0][1]
    assert orders[0][0] != orders[1][0]
    assert sorted(orders[1][0]) == list(range(203))


def test_raw_records_come_back_exactly(raw_ds):
    path, records = raw_ds
    loader = sk.Loader(path, 16, transform=None, rank=0, world_size=1, shuffle="full", layout="NHWC")
    for images, labels, ids, real in loader.batches():
        for img, label, i in zip(images[:real], labels[:real], ids[:real]):
            assert np.array_equal(img.permute(1, 2, 0).numpy(), records[int(i)])
            assert int(label) == int(i) % 7
    ds = sk.Dataset(path)
    payload, label = ds[17]
    assert np.array_equal(payload, records[17]) and label == 17 % 7 and ds.key(17) == "r17"
    assert ds.shape == (8, 6, 3) and ds.kind == "raw_u8"
    assert np.array_equal(ds[-1][0], records[-1])
    with pytest.raises(IndexError):
        ds[203]


def test_state_dict_resumes_exactly_in_a_new_loader(jpeg_ds):
    opts = dict(workers=2, size=32, seed=11, rank=0, world_size=1, shuffle="full")
    whole = sk.Loader(jpeg_ds, 4, **opts)
    whole.set_epoch(2)
    want = [(x.clone(), y.clone()) for x, y in whole]
    first = sk.Loader(jpeg_ds, 4, **opts)
    first.set_epoch(2)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    assert state["epoch"] == 2 and state["batch"] == 3
    second = sk.Loader(jpeg_ds, 4, **opts)
    second.load_state_dict(state)
    second.set_epoch(2)  # as a training loop does after resuming: keeps the position
    rest = list(second)
    assert len(rest) == len(want) - 3
    for (x, y), (wx, wy) in zip(rest, want[3:]):
        assert torch.equal(x, wx) and torch.equal(y, wy)
    # A state for another order is refused.
    other = sk.Loader(jpeg_ds, 4, **dict(opts, seed=12))
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(state)


def test_stats_count_the_fills_alone_and_shared(jpeg_ds):
    """Every fill is counted as the producer thread's alone or the whole
    team's; one worker fills alone and has nothing to measure."""
    batches = {}
    for workers in (1, 2):
        loader = sk.Loader(jpeg_ds, 4, workers=workers, rank=0, world_size=1, size=32)
        for epoch in (0, 1, 2):
            loader.set_epoch(epoch)
            batches[workers] = sum(1 for _ in loader)
        stats = loader.stats()
        fills = stats["fills_alone"] + stats["fills_shared"]
        # A fill takes one batch or more, and a loader may fill ahead of the
        # last batch taken.
        assert 1 <= fills <= 3 * batches[workers] + 4, stats
        if workers == 1:
            assert stats["fills_shared"] == 0 and stats["fill_settled"] is True, stats
        loader.reset_stats()
        assert loader.stats()["fills_alone"] == loader.stats()["fills_shared"] == 0


def test_a_held_batch_keeps_its_values_while_20_more_go_by(raw_ds):
    path, records = raw_ds
    loader = sk.Loader(path, 4, transform=None, rank=0, world_size=1, prefetch=2, layout="NHWC")
    batches = loader.batches()
    held, _, ids, _ = next(batches)
    copy = held.clone()
    for _ in range(20):
        next(batches)
    assert torch.equal(held, copy)
    assert np.array_equal(held[0].permute(1, 2, 0).numpy(), records[int(ids[0])])
    del loader, batches  # the batch outlives the loader too
    assert torch.equal(held, copy)


def test_corrupt_records_raise_or_are_counted(tmp_path):
    src = tmp_path / "ds"
    with sk.Writer(str(src), kind="raw_u8", shape=(4, 4, 1), compression="none", shard_size=1 << 16) as w:
        for i in range(64):
            w.add(bytes([i]) * 16, 0)
    shard = os.path.join(str(src), "shard-00000.sks")
    data = bytearray(open(shard, "rb").read())
    data[64 + 16 * 10 + 3] ^= 0xFF  # a byte inside an early record's payload
    open(shard, "wb").write(bytes(data))
    loader = sk.Loader(str(src), 8, transform=None, rank=0, world_size=1, shuffle="none")
    with pytest.raises(sk.CorruptionError, match=r"shard-00000\.sks: record \d+"):
        list(loader)
    skipping = sk.Loader(str(src), 8, transform=None, rank=0, world_size=1, shuffle="none",
                         on_corrupt="skip", skip_budget=5)
    assert sum(len(y) for _, y in skipping) == 64
    stats = skipping.stats()
    assert stats["corrupt_skipped"] == 1 and "shard-00000.sks" in stats["corrupt_messages"][0]
    assert stats["corrupt_records"] == 1 and stats["samples_replaced"] == 1


def test_skip_counts_records_and_replacements_apart(tmp_path):
    """One damaged zstd block fails every record it holds: stats() counts
    those records once each (corrupt_records), the samples delivered with
    another record in their place once each (samples_replaced; the old name
    corrupt_skipped is the same number), and one damage (corrupt_units),
    however many replacements land in the damaged block again."""
    rnd = np.random.default_rng(43)
    n = 1000
    with sk.Writer(str(tmp_path / "ds"), kind="raw_u8", shape=(32, 32, 3), compression="zstd") as w:
        for i in range(n):
            a = rnd.integers(0, 256, (32, 32, 3), dtype=np.uint8)  # incompressible: 3 blocks or so
            a[0, 0, 0], a[0, 0, 1] = i % 256, i // 256
            w.add(a, 0)
    shard = tmp_path / "ds" / "shard-00000.sks"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside a middle block's compressed bytes
    shard.write_bytes(bytes(data))
    loader = sk.Loader(str(tmp_path / "ds"), 50, transform=None, rank=0, world_size=1, workers=2,
                       on_corrupt="skip", skip_budget=1)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen = set()
        for images, _ in loader:
            arr = np.asarray(images)
            seen.update((arr[:, 0, 0, 0].astype(int) + 256 * arr[:, 1, 0, 0].astype(int)).tolist())
        bad = n - len(seen)  # the records never delivered: the damaged block's
        assert 0 < bad < n // 2, bad
        stats = loader.stats()
        assert stats["corrupt_units"] == 1, stats
        assert stats["corrupt_records"] == bad, stats
        assert stats["samples_replaced"] == (epoch + 1) * bad, stats
        assert stats["corrupt_skipped"] == stats["samples_replaced"]


# A web server in a thread of the reading process: the loader's reads (its
# open, and every batch) can be answered only while they run without the GIL.
GIL_SCRIPT = r"""
import http.server, os, sys, threading
import shardkit
root = sys.argv[1]

class Files(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def do_HEAD(self):
        self.serve(False)
    def do_GET(self):
        self.serve(True)
    def serve(self, body):
        path = os.path.join(root, self.path.lstrip("/").split("?")[0])
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = open(path, "rb").read()
        part, status = data, 200
        if body and self.headers.get("Range"):
            a, b = self.headers["Range"].split("=")[1].split("-")
            a, b = int(a), min(int(b), len(data) - 1)
            part, status = data[a:b + 1], 206
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        self.send_header("ETag", '"%x"' % os.stat(path).st_mtime_ns)
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        if body:
            self.wfile.write(part)

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = "http://127.0.0.1:%d" % server.server_address[1]
loader = shardkit.Loader(url, 8, workers=1, size=64, transform="val", rank=0, world_size=1)
print("records", sum(len(labels) for _, labels in loader))
"""


def test_python_threads_run_while_the_loader_opens_and_reads(jpeg_ds):
    # Held through C++ work, the GIL would keep the server thread from ever
    # answering: the open or a batch would fail once its retries ran out.
    env = dict(os.environ, SHARDKIT_RETRY_SECONDS="20", SHARDKIT_STALL_SECONDS="20",
               PYTHONPATH=os.path.dirname(os.path.dirname(sk.__file__)))
    r = subprocess.run([sys.executable, "-c", GIL_SCRIPT, jpeg_ds], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["records", "40"], r.stdout + r.stderr


def test_bad_arguments_are_value_errors_and_missing_paths_os_errors(jpeg_ds, tmp_path):
    for kwargs in (dict(batch_size=0), dict(batch_size=4, workers=0), dict(batch_size=4, layout="CHW"),
                   dict(batch_size=4, transform="rotate"), dict(batch_size=4, shuffle="random"),
                   dict(batch_size=4, rank=2, world_size=2), dict(batch_size=4, on_corrupt="ignore"),
                   dict(batch_size=4, rank=0), dict(batch_size=10**20), dict(batch_size=4, seed=-1),
                   dict(batch_size=4, workers=10**12), dict(batch_size="x")):
        with pytest.raises(ValueError):
            sk.Loader(jpeg_ds, **kwargs)
    with pytest.raises(OSError):
        sk.Loader(str(tmp_path / "nowhere"), 4)
    with pytest.raises(OSError, match="no such file or directory"):  # a path that is not UTF-8, named readably
        sk.Loader(os.fsencode(str(tmp_path)) + b"/\xff", 4)
    with pytest.raises(OSError):
        sk.Dataset(str(tmp_path / "nowhere"))


def test_loader_options_are_converted_by_the_cores_keyword_table_and_checked_by_the_loader(raw_ds):
    path, _ = raw_ds
    base = dict(transform=None, rank=0, world_size=1)
    # Converted as operator.index() would, and read back from the core's options.
    loader = sk.Loader(path, np.int16(8), transform=None, rank=np.int64(1), world_size=True + 1, seed=2**64 - 1,
                       shuffle=False, drop_last=1)
    assert (loader.batch_size, loader.rank, loader.world_size, loader.seed) == (8, 1, 2, 2**64 - 1)
    assert len(loader) == 203 // 2 // 8
    cap = sk._shardkit._MAX_PREFETCH
    for kwargs, message in (
            (dict(batch_size="x"), "batch_size must be an integer, not 'x'"),
            (dict(batch_size=10**20), "batch_size=100000000000000000000 is out of range"),
            (dict(seed=-1), "seed=-1 is out of range"),
            (dict(seed=2**64), "seed=18446744073709551616 is out of range"),
            (dict(skip_budget=-1), "skip_budget must be >= 0"),
            (dict(shuffle="random"), "shuffle must be 'auto', 'full', 'block' or 'none', not 'random'"),
            (dict(layout="CHW"), "layout must be 'NCHW' or 'NHWC', not 'CHW'"),
            (dict(on_corrupt="ignore"), "on_corrupt must be 'fail' or 'skip', not 'ignore'"),
            (dict(transform="rotate"),
             "transform must be 'train', 'val', 'resize', 'crop', None or torchvision-style transforms, not 'rotate'"),
            (dict(workers=10**12), "workers=1000000000000 is out of range"),
            (dict(workers=300), "workers must be in 1..256, not 300"),
            (dict(read_ahead_bytes=-1), "read-ahead bytes must be in 1 MiB..64 GiB"),
            (dict(rank=3, world_size=2), "rank 3 is not in 0..world_size-1 (world size 2)"),
            (dict(prefetch=cap + 1), "prefetch must be in 1..%d, not %d" % (cap, cap + 1))):
        with pytest.raises(ValueError, match=re.escape(message)):
            sk.Loader(path, **{**base, "batch_size": 4, **kwargs})
    # The package's cap on prefetch_factor x workers is the loader's bound.
    sk.Loader(path, 4, prefetch=cap, **base)
    sk.Loader(path, 4, workers=2, prefetch_factor=10**6, **base)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        sk._shardkit._Loader(os.fsencode(path), batch_size=4, bogus=1)


def test_writer_output_verifies_and_reads_back(tmp_path, jpeg_ds):
    src = sk.Dataset(jpeg_ds)
    out = str(tmp_path / "copy")
    with sk.Writer(out, kind="jpeg", classes=src.classes, shard_size=1 << 16) as w:
        for i in range(len(src)):
            payload, label = src[i]
            w.add(payload, label, key=src.key(i))
    r = subprocess.run([tool("tools", "pack", "shardkit-pack"), "verify", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    copy = sk.Dataset(out)
    assert len(copy) == len(src) and copy.classes == src.classes
    assert len([f for f in os.listdir(out) if f.endswith(".sks")]) > 1
    for i in range(len(src)):
        assert copy[i] == src[i] and copy.key(i) == src.key(i)
    a = sk.Loader(jpeg_ds, 8, size=32, seed=3, rank=0, world_size=1)
    b = sk.Loader(out, 8, size=32, seed=3, rank=0, world_size=1)
    for (x, y), (u, v) in zip(a, b):
        assert torch.equal(x, u) and torch.equal(y, v)


def test_writer_follows_the_packers_rules(tmp_path):
    """Raw records written by the Writer are the shards shardkit-pack makes of
    the same records, byte for byte: compression, level, block size and
    records a shard are the library's rules, decided in one place."""
    import struct

    rng = np.random.default_rng(5)
    n, h, w = 700, 10, 12
    images = (rng.integers(0, 40, (n, h, w)) * rng.integers(0, 2, (n, h, w))).astype(np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    (tmp_path / "img").write_bytes(struct.pack(">BBBBIII", 0, 0, 8, 3, n, h, w) + images.tobytes())
    (tmp_path / "lab").write_bytes(struct.pack(">BBBBI", 0, 0, 8, 1, n) + labels.tobytes())
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "idx", "--images", str(tmp_path / "img"),
                    "--labels", str(tmp_path / "lab"), "--shard-size", "20000", str(tmp_path / "packed")],
                   check=True, capture_output=True)
    with sk.Writer(str(tmp_path / "written"), kind="raw_u8", shape=(h, w, 1), shard_size=20000) as wr:
        for i in range(n):
            wr.add(images[i], int(labels[i]), key="%08d" % i)
    shards = sorted(f for f in os.listdir(tmp_path / "packed") if f.startswith("shard-"))
    assert len(shards) > 3
    assert sorted(f for f in os.listdir(tmp_path / "written") if f.startswith("shard-")) == shards
    for f in shards:
        assert (tmp_path / "written" / f).read_bytes() == (tmp_path / "packed" / f).read_bytes(), f


def test_writer_refuses_bad_records_and_an_aborted_write_is_no_dataset(tmp_path):
    with pytest.raises(ValueError, match="record '0'"):
        with sk.Writer(str(tmp_path / "a"), kind="jpeg") as w:
            w.add(b"not a jpeg", 0)
    # An aborted write leaves nothing: the directory it made is gone.
    assert not os.path.exists(str(tmp_path / "a"))
    with sk.Writer(str(tmp_path / "b"), kind="raw_u8", shape=(2, 2, 1), classes=["x"]) as w:
        with pytest.raises(ValueError, match="5 bytes, the shape needs 4"):
            w.add(b"12345", 0)
        with pytest.raises(ValueError, match="classes"):
            w.add(b"1234", 3)
        w.add(b"1234", 0)
    assert len(sk.Dataset(str(tmp_path / "b"))) == 1
    with pytest.raises(ValueError, match=r"already holds a dataset .*Writer\(overwrite=True\)"):
        sk.Writer(str(tmp_path / "b"), kind="raw_u8", shape=(2, 2, 1))
    # Closing with no record: an error, and the dataset being replaced stays.
    with pytest.raises(ValueError, match="no record was added"):
        sk.Writer(str(tmp_path / "b"), kind="raw_u8", shape=(2, 2, 1), overwrite=True).close()
    assert len(sk.Dataset(str(tmp_path / "b"))) == 1
    with pytest.raises(ValueError):
        sk.Writer(str(tmp_path / "c"), kind="raw")
    for kwargs in (dict(shard_size=-1), dict(kind="raw_u8", shape=(-1, 2, 3)), dict(classes=["\udcff"])):
        with pytest.raises(ValueError):
            sk.Writer(str(tmp_path / "d"), **kwargs)
    # Keys are any bytes a file name holds, and come back as os.fsdecode gives them.
    with sk.Writer(str(tmp_path / "e"), kind="raw_u8", shape=(1, 1, 1)) as w:
        w.add(b"x", 0, key="caf\udcff")
        with pytest.raises(ValueError, match="label"):
            w.add(b"x", 10**12)
    assert sk.Dataset(str(tmp_path / "e")).key(0) == "caf\udcff"


def test_writer_takes_arrays_of_the_declared_layout_only(tmp_path):
    """A (3, 32, 32) array (CHW, as torchvision holds SVHN) for shape=(32, 32, 3)
    has the right byte count and the wrong layout: refused naming both
    shapes, never stored scrambled. Bytes keep the byte-count check; (H, W)
    is (H, W, 1)'s layout."""
    hwc = np.arange(32 * 32 * 3, dtype=np.uint32).astype(np.uint8).reshape(32, 32, 3)
    with sk.Writer(str(tmp_path / "rgb"), kind="raw_u8", shape=(32, 32, 3), classes=["a"]) as w:
        with pytest.raises(ValueError, match=re.escape(
                "an array of shape (3, 32, 32), but the writer's shape is (32, 32, 3) (H, W, C) "
                "(a CHW array: pass a.transpose(1, 2, 0))")):
            w.add(hwc.transpose(2, 0, 1).copy(), 0, key="chw")
        for wrong in (hwc.reshape(32, 96), hwc.reshape(16, 64, 3), hwc[None]):
            with pytest.raises(ValueError, match=r"record 'x'.*an array of shape .*\(32, 32, 3\)"):
                w.add(wrong, 0, key="x")
        w.add(hwc.transpose(2, 0, 1).transpose(1, 2, 0), 0, key="hwc")  # a view of HWC layout
        w.add(hwc.tobytes(), 0, key="bytes")
        w.add(hwc.reshape(-1), 0, key="flat")
        with pytest.raises(ValueError, match="3071 bytes, the shape needs 3072"):
            w.add(hwc.tobytes()[1:], 0)
    ds = sk.Dataset(str(tmp_path / "rgb"))
    assert len(ds) == 3 and all(np.array_equal(ds[i][0], hwc) for i in range(3))
    gray = np.arange(28 * 28, dtype=np.uint32).astype(np.uint8).reshape(28, 28)
    with sk.Writer(str(tmp_path / "gray"), kind="raw_u8", shape=(28, 28, 1), classes=["a"]) as w:
        w.add(gray, 0)
        w.add(gray[:, :, None], 0)
        with pytest.raises(ValueError, match=re.escape("an array of shape (1, 28, 28)")):
            w.add(gray[None], 0)
    ds = sk.Dataset(str(tmp_path / "gray"))
    assert all(np.array_equal(ds[i][0][:, :, 0], gray) for i in range(2))


def test_a_writer_without_class_names_numbers_the_classes(tmp_path):
    """Without classes, labels are class numbers (as shardkit-pack takes them
    without --class-names): the manifest names "0" up to the largest label,
    so Dataset.classes and a training run see as many classes as the labels
    say; labels all -1 make an unlabelled dataset, with no classes."""
    with sk.Writer(str(tmp_path / "numbered"), kind="raw_u8", shape=(1, 1, 1)) as w:
        for label in (3, 0, 7, 7):
            w.add(bytes([label]), label)
    ds = sk.Dataset(str(tmp_path / "numbered"))
    assert ds.classes == [str(c) for c in range(8)]
    assert [ds[i][1] for i in range(len(ds))] == [3, 0, 7, 7]
    with sk.Writer(str(tmp_path / "unlabelled"), kind="raw_u8", shape=(1, 1, 1)) as w:
        w.add(b"x", -1)
    assert sk.Dataset(str(tmp_path / "unlabelled")).classes == []
    with sk.Writer(str(tmp_path / "huge"), kind="raw_u8", shape=(1, 1, 1)) as w:
        with pytest.raises(ValueError, match=r"label 1048576 with no classes given.*classes="):
            w.add(b"x", 1 << 20)
        w.add(b"x", 2)
    assert sk.Dataset(str(tmp_path / "huge")).classes == ["0", "1", "2"]


def test_writer_kinds_are_the_manifests_names_and_its_checks_are_the_cores(tmp_path):
    for kind in ("raw_u8", "raw"):  # "raw": the Writer's first name for raw_u8, still taken
        out = str(tmp_path / kind)
        with sk.Writer(out, kind=kind, shape=(2, 2, 5), classes=["a"]) as w:  # any C, as shardkit-pack's
            w.add(bytes(range(20)), 0)
        ds = sk.Dataset(out)
        assert ds.kind == ds.manifest["record"]["kind"] == "raw_u8" and ds.shape == (2, 2, 5)
        assert ds[0][0].tolist() == np.arange(20).reshape(2, 2, 5).tolist()
    with pytest.raises(IndexError, match=re.escape("record index 1 out of range (1 records)")):
        ds[1]
    with pytest.raises(IndexError, match=re.escape("record index -2 out of range (1 records)")):
        ds.key(-2)
    assert ds[np.int64(-1)][1] == 0 and list(ds)[0][1] == 0
    refused = str(tmp_path / "refused")
    for kwargs, message in (
            (dict(kind="png"), "kind must be 'jpeg', 'raw_u8' or 'bytes', not 'png'"),
            (dict(kind="raw_u8"), "raw_u8 shape must be [H, W, C], not []"),
            (dict(kind="raw_u8", shape=(2, 0, 1)), "raw_u8 shape [2, 0, 1] has a dimension out of range"),
            (dict(kind="raw_u8", shape=(65536, 65536, 1)), "raw_u8 shape [65536, 65536, 1] too large"),
            (dict(kind="jpeg", shape=(2, 2, 1)), "shape [2, 2, 1] is for raw_u8 records only, not jpeg"),
            (dict(compression="lz4"), "compression must be 'auto', 'zstd' or 'none'"),
            (dict(classes=["ok", "caf\udcff"]), "class 1 name 'caf\\xff' is not valid UTF-8"),
            (dict(classes=["\ud800"]), "class 0 name '\\xed\\xa0\\x80' is not valid UTF-8")):
        with pytest.raises(ValueError, match=re.escape(message)):
            sk.Writer(refused, **kwargs)
        assert not os.path.exists(refused)  # refused before anything was made


def test_integers_are_taken_exactly_never_truncated(raw_ds, tmp_path):
    """Integers as operator.index takes them (NumPy and torch integers too), or
    floats that are integers exactly (MATLAB labels are doubles); 2.99, "4",
    NaN or a fractional tensor is refused, never truncated."""
    path, _ = raw_ds
    base = dict(transform=None, rank=0, world_size=1)
    loader = sk.Loader(path, np.int64(8), transform=None, rank=np.int32(1), world_size=torch.tensor(2.0))
    assert (loader.batch_size, loader.rank, loader.world_size) == (8, 1, 2)
    assert sk.Loader(path, 4.0, **base).batch_size == 4
    for kwargs in (dict(batch_size=2.99), dict(batch_size="4"), dict(batch_size=torch.tensor(4.7)),
                   dict(batch_size=float("nan")), dict(seed=1.7), dict(prefetch=2.5), dict(workers=1.5),
                   dict(num_workers=1.5)):
        with pytest.raises(ValueError, match="must be an integer, not"):
            sk.Loader(path, **{**base, "batch_size": 4, **kwargs})
    with pytest.raises(ValueError, match="num_workers must be non-negative, not -3"):
        sk.Loader(path, 4, num_workers=-3, **base)
    # Past the field's range the value given is named, not the one it would saturate to.
    with pytest.raises(ValueError, match=re.escape("batch_size=1099511627776 is out of range")):
        sk.Loader(path, 2**40, **base)
    # A Writer's labels likewise: 3.0 is label 3, 2.5 names the record.
    with sk.Writer(str(tmp_path / "w"), kind="raw_u8", shape=(1, 1, 1)) as w:
        w.add(np.zeros((1, 1, 1), np.uint8), np.float64(3.0), key="a")
        with pytest.raises(ValueError, match=re.escape("record 'b': label must be an integer, not 2.5")):
            w.add(np.zeros((1, 1, 1), np.uint8), 2.5, key="b")
    assert sk.Dataset(str(tmp_path / "w"))[0][1] == 3


def test_a_path_with_a_null_byte_is_refused_before_anything_is_touched(tmp_path, raw_ds):
    path, _ = raw_ds
    where = str(tmp_path / "out") + "\0x"
    for make in (lambda: sk.Dataset(where), lambda: sk.Loader(where, 4),
                 lambda: sk.Writer(where, "raw_u8", shape=(2, 2, 1))):
        with pytest.raises(ValueError, match="path .* holds a null byte"):
            make()
    with pytest.raises(ValueError, match="cache_dir .* holds a null byte"):
        sk.Loader(path, 4, transform=None, cache_dir=where)
    with pytest.raises(ValueError, match="cache_dir must be a str, bytes or os.PathLike, not 5"):
        sk.Loader(path, 4, transform=None, cache_dir=5)
    assert os.listdir(tmp_path) == []


def test_the_cache_options_are_checked_as_the_tools_check_them(tmp_path, raw_ds):
    """A node cache is for object storage: its options are never ignored in silence."""
    path, _ = raw_ds
    with pytest.raises(ValueError, match="cache_limit bounds a node cache: it needs cache_dir"):
        sk.Loader(path, 4, transform=None, cache_limit="200G")
    with pytest.raises(ValueError, match="cache_dir is for object storage"):
        sk.Loader(path, 4, transform=None, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="cache_limit must be a number of bytes or a size such as"):
        sk.Loader(path, 4, transform=None, cache_dir=str(tmp_path / "cache"), cache_limit="lots")
    assert not (tmp_path / "cache").exists()


def test_normalize_refuses_what_is_not_a_batch_and_a_zero_std():
    batch = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="std non-zero"):
        sk.normalize(batch, 0.5, 0)
    with pytest.raises(ValueError, match="finite"):
        sk.normalize(batch, float("nan"), 1)
    for bad in ([1, 2, 3], None, torch.zeros(3, dtype=torch.uint8), torch.zeros(2, 3, dtype=torch.uint8)):
        with pytest.raises(TypeError, match=re.escape("a tensor [B, C, H, W]")):
            sk.normalize(bad)


def test_a_pickled_dataset_is_refused_where_another_dataset_replaced_it(tmp_path):
    """spawn and forkserver workers reopen a Dataset by path: one packed again
    there since is refused, not read while the parent reads the old one."""
    import pickle

    def write(seed):
        rng = np.random.default_rng(seed)
        with sk.Writer(str(tmp_path / "ds"), kind="raw_u8", shape=(2, 2, 1), overwrite=True) as w:
            for i in range(10):
                w.add(rng.integers(0, 256, (2, 2, 1), dtype=np.uint8), i % 2, key=str(i))

    write(0)
    ds = sk.Dataset(str(tmp_path / "ds"))
    state = pickle.dumps(ds)
    again = pickle.loads(state)
    assert np.array_equal(again[3][0], ds[3][0])
    write(1)
    with pytest.raises(ValueError, match="not the one this Dataset was pickled from"):
        pickle.loads(state)


def test_a_daemon_thread_reading_when_the_interpreter_exits_ends_quietly(tmp_path):
    """CPython ends a daemon thread at exit inside PyEval_RestoreThread; the
    binding's GIL release must let that unwind pass (a destructor in its way
    is std::terminate: SIGABRT). Dataset reads, each one through the release
    (no block cache); torch's own tensor deallocation has the same fault, so
    no tensors are made here. Records of 768 KiB: the reader spends its time
    in C++, the GIL released."""
    path = str(tmp_path / "big")
    rng = np.random.default_rng(0)
    with sk.Writer(path, kind="raw_u8", shape=(512, 512, 3)) as w:
        for i in range(4):
            w.add(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8), 0, key=str(i))
    script = (
        "import sys, threading\n"
        "sys.path.insert(0, %r)\n"
        "import shardkit\n"
        "started = threading.Event()\n"
        "def read():\n"
        "    ds = shardkit.Dataset(%r, block_cache_bytes=0)\n"
        "    while True:\n"
        "        for i in range(len(ds)):\n"
        "            ds[i]\n"
        "            started.set()\n"
        "threading.Thread(target=read, daemon=True).start()\n"
        "started.wait()\n"
        "sys.exit(0)\n" % (os.path.dirname(os.path.dirname(sk.__file__)), path))
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
