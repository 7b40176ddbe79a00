"""shardkit.Loader as a drop-in for the DataLoader of a training script:
torchvision's geometric transforms with torchvision's parameters and pixels,
epochs that move on without set_epoch, normalisation with torchvision's
constants, DataLoader's arguments, no silent fallbacks, one Writer path with
shardkit-pack, resume across world sizes refused with the reason, a Dataset
that pickles, and the example script's argument checks."""
import io
import logging
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import BUILD, shardkit_module, tool
from test_val_pixels import make_photo_set

sk = shardkit_module()
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as TV  # noqa: E402

T = sk.transforms
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def photo_ds(tmp_path_factory, photos):
    """30 real photographs of ImageNet-like sizes, packed; (dataset dir, jpeg dir)."""
    root = tmp_path_factory.mktemp("dropin")
    make_photo_set(photos, str(root / "jpegs"), n=30)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "jpegs"), str(root / "ds")],
                   check=True, capture_output=True)
    return str(root / "ds"), str(root / "jpegs")


def loader_pixels(ds, transform, **kw):
    """{key: uint8 CHW array} for every record, in order, through the Loader."""
    names = sk.Dataset(ds)
    out = {}
    loader = sk.Loader(ds, 8, transform=transform, shuffle=False, rank=0, world_size=1, workers=2, **kw)
    for images, _, ids, real in loader.batches():
        for i in range(real):
            out[names.key(int(ids[i]))] = images[i].numpy()
    return out


def mean_diffs(ds, jpegs, ours, reference):
    diffs = []
    for key, mine in ours.items():
        ref = reference(Image.open(os.path.join(jpegs, key)).convert("RGB")).numpy()
        assert ref.shape == mine.shape, (key, ref.shape, mine.shape)
        diffs.append(np.abs(ref.astype(np.int16) - mine.astype(np.int16)).mean())
    return float(np.mean(diffs)), float(max(diffs))


# Each geometry with torchvision's parameters, against torchvision's pixels,
# at ImageNet's scale (outputs about half the photo's size; much stronger
# downscales differ a little more: about 1 grey level on average at 4x).
CASES = [
    ("resize+centercrop", [T.Resize(256), T.CenterCrop(224)], [TV.Resize(256), TV.CenterCrop(224)]),
    ("other sizes, non-square crop", [T.Resize(288), T.CenterCrop((256, 192))],
     [TV.Resize(288), TV.CenterCrop((256, 192))]),
    ("squash resize", [T.Resize((224, 224))], [TV.Resize((224, 224))]),
    ("squash then crop", [T.Resize((200, 260)), T.CenterCrop(192)], [TV.Resize((200, 260)), TV.CenterCrop(192)]),
    ("flip p=1", [T.Resize((192, 256)), T.RandomHorizontalFlip(p=1.0)],
     [TV.Resize((192, 256)), TV.RandomHorizontalFlip(p=1.0)]),
    # scale (1, 1) with ratio (2, 2) cannot fit these photos: RandomResizedCrop's
    # deterministic fallback (the centre at the ratio's bound), in both.
    ("random resized crop, fallback", [T.RandomResizedCrop(224, scale=(1.0, 1.0), ratio=(2.0, 2.0))],
     [TV.RandomResizedCrop(224, scale=(1.0, 1.0), ratio=(2.0, 2.0))]),
]


@pytest.mark.parametrize("name,ours,theirs", CASES, ids=[c[0] for c in CASES])
def test_transforms_give_torchvisions_pixels(photo_ds, name, ours, theirs):
    ds, jpegs = photo_ds
    pixels = loader_pixels(ds, T.Compose(ours))
    assert len(pixels) == 30
    mean, worst = mean_diffs(ds, jpegs, pixels, TV.Compose(theirs + [TV.PILToTensor()]))
    print("%s: mean |diff| %.3f, worst photo %.3f" % (name, mean, worst))
    assert mean < 1.0, name
    assert worst < 3.0, name
    # torchvision's own objects are translated to the same loader.
    same = loader_pixels(ds, TV.Compose(theirs + [TV.PILToTensor()]))
    assert all(np.array_equal(pixels[k], same[k]) for k in pixels)


def test_random_resized_crop_takes_torchvisions_parameters(photo_ds):
    ds, _ = photo_ds
    wide = loader_pixels(ds, [T.RandomResizedCrop((64, 96), scale=(0.9, 1.0)), T.RandomHorizontalFlip(0.0)])
    assert next(iter(wide.values())).shape == (3, 64, 96)
    # The same seed and epoch give the same crops; another scale range others.
    again = loader_pixels(ds, [T.RandomResizedCrop((64, 96), scale=(0.9, 1.0)), T.RandomHorizontalFlip(0.0)])
    small = loader_pixels(ds, [T.RandomResizedCrop((64, 96), scale=(0.05, 0.1)), T.RandomHorizontalFlip(0.0)])
    assert all(np.array_equal(wide[k], again[k]) for k in wide)
    assert sum(not np.array_equal(wide[k], small[k]) for k in wide) > 25
    # A crop of about the whole photo is close to the squashed photo; a tenth of it is not.
    squash = loader_pixels(ds, [T.Resize((64, 96))])
    d_wide = np.mean([np.abs(wide[k].astype(int) - squash[k]).mean() for k in wide])
    d_small = np.mean([np.abs(small[k].astype(int) - squash[k]).mean() for k in wide])
    assert d_wide < d_small / 2, (d_wide, d_small)


def test_what_the_loader_does_not_run_is_refused_with_where_it_belongs(photo_ds):
    ds, _ = photo_ds
    cases = [
        (TV.Compose([TV.RandomResizedCrop(224), TV.ToTensor(), TV.Normalize([0.5] * 3, [0.2] * 3)]),
         "shardkit.normalize"),
        (TV.Compose([TV.RandomResizedCrop(224), TV.ColorJitter(0.4, 0.4, 0.4)]), "after the loader"),
        ([T.Resize(256)], "CenterCrop"),
        (TV.Compose([TV.Resize(256, interpolation=TV.InterpolationMode.BICUBIC), TV.CenterCrop(224)]),
         "bilinear"),
        ([T.Resize(100), T.CenterCrop(224)], "larger than the Resize"),
        ([T.RandomResizedCrop(32), T.CenterCrop(16)], "RandomResizedCrop \\+ CenterCrop does not run"),
        ("bogus", "transform must be"),
    ]
    for transform, message in cases:
        with pytest.raises(ValueError, match=message):
            sk.Loader(ds, 4, transform=transform, rank=0, world_size=1)


def test_iterating_again_without_set_epoch_reads_the_next_epoch(photo_ds):
    ds, _ = photo_ds

    def epoch_batches(loader):
        return [(x.clone(), y.clone()) for x, y in loader]

    a = sk.Loader(ds, 8, size=48, seed=5, rank=0, world_size=1)
    first, second = epoch_batches(a), epoch_batches(a)
    assert a.epoch == 2
    assert not all(torch.equal(x, u) for (x, _), (u, _) in zip(first, second))
    b = sk.Loader(ds, 8, size=48, seed=5, rank=0, world_size=1)
    b.set_epoch(1)
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(second, epoch_batches(b)))
    # An explicit set_epoch wins, and is kept for every later iteration's count.
    a.set_epoch(0)
    assert all(torch.equal(x, u) for (x, _), (u, _) in zip(first, epoch_batches(a)))
    # Resuming still works: a state after a whole epoch continues with the next.
    c = sk.Loader(ds, 8, size=48, seed=5, rank=0, world_size=1)
    epoch_batches(c)
    d = sk.Loader(ds, 8, size=48, seed=5, rank=0, world_size=1)
    d.load_state_dict(c.state_dict())
    assert all(torch.equal(x, u) for (x, _), (u, _) in zip(second, epoch_batches(d)))


def test_normalize_takes_torchvisions_constants_as_written(photo_ds):
    ds, jpegs = photo_ds
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    loader = sk.Loader(ds, 4, transform=[T.Resize((64, 64))], shuffle=False, rank=0, world_size=1)
    images, _ = next(iter(loader))
    ours = sk.normalize(images, mean, std)
    ref = TV.Normalize(mean, std)(images.float() / 255)
    assert ours.dtype == torch.float32 and torch.allclose(ours, ref, atol=1e-5)
    assert images.dtype == torch.uint8  # the uint8 batch is left as it is
    nhwc = sk.Loader(ds, 4, transform=[T.Resize((64, 64))], shuffle=False, rank=0, world_size=1, layout="NHWC")
    x, _ = next(iter(nhwc))
    y = sk.normalize(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(y, sk.normalize(images), atol=1e-6)


def test_dataloader_arguments_are_accepted_where_they_mean_the_same(photo_ds):
    ds, _ = photo_ds
    plain = sk.Loader(ds, 8, size=32, shuffle="none", rank=0, world_size=1)
    same = sk.Loader(ds, batch_size=8, size=32, shuffle=False, num_workers=0, pin_memory=True,
                     persistent_workers=True, prefetch_factor=2, rank=0, world_size=1)
    assert same.shuffle_mode == "none"
    for (x, y), (u, v) in zip(plain, same):
        assert torch.equal(x, u) and torch.equal(y, v)
    assert sk.Loader(ds, 8, size=32, shuffle=True, rank=0, world_size=1).shuffle_mode in ("full", "block")
    assert len(sk.Loader(ds, 8, size=32, drop_last=True, rank=0, world_size=1)) == 30 // 8
    for name, value, why in (("collate_fn", lambda b: b, "already collated"), ("worker_init_fn", None, "no Python"),
                             ("generator", torch.Generator(), "no generator without a sampler"),
                             ("bogus", 1, "unexpected")):
        with pytest.raises(TypeError, match=why):
            sk.Loader(ds, 8, rank=0, world_size=1, **{name: value})


def test_the_resolved_world_and_skipped_records_reach_the_logs(photo_ds, tmp_path, monkeypatch, caplog):
    ds, _ = photo_ds
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sk, "_said", set())
    with pytest.warns(UserWarning, match="rank 0 of 1"):
        sk.Loader(ds, 8)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with caplog.at_level(logging.INFO, logger="shardkit"):
        sk.Loader(ds, 8)
    assert "rank 1 of 3 (from RANK/WORLD_SIZE)" in caplog.text
    # A corrupt record under on_corrupt="skip": counted and named in the log.
    import shutil
    bad = str(tmp_path / "bad")
    shutil.copytree(ds, bad)
    shard = sorted(f for f in os.listdir(bad) if f.endswith(".sks"))[0]
    with open(os.path.join(bad, shard), "r+b") as f:
        f.seek(os.path.getsize(os.path.join(bad, shard)) // 3)
        f.write(b"\xff" * 64)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardkit"):
        for _ in sk.Loader(bad, 4, size=32, on_corrupt="skip", skip_budget=1000, rank=0, world_size=1):
            pass
    assert "1 sample(s) replaced" in caplog.text and "1 corrupt record(s)" in caplog.text, caplog.text
    assert shard in caplog.text, caplog.text


def test_the_writer_converts_and_validates_as_shardkit_pack_does(tmp_path, photos):
    photo = Image.open(photos[0]).convert("RGB").resize((120, 90))
    png = io.BytesIO()
    photo.save(png, format="PNG")
    cmyk = io.BytesIO()
    photo.convert("CMYK").save(cmyk, format="JPEG")
    out = str(tmp_path / "w")
    with sk.Writer(out, kind="jpeg", classes=["a"]) as w:
        w.add(png.getvalue(), 0, key="saved_as_png.JPEG")
        w.add(cmyk.getvalue(), 0, key="cmyk.JPEG")
        with pytest.raises(ValueError, match="record 'broken.JPEG'"):
            w.add(png.getvalue()[:200], 0, key="broken.JPEG")
        assert w.converted == 2
    r = subprocess.run([tool("tools", "pack", "shardkit-pack"), "verify", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    images, _ = next(iter(sk.Loader(out, 2, transform=[T.Resize((90, 120))], shuffle=False, rank=0,
                                    world_size=1)))
    ref = torch.from_numpy(np.array(photo)).permute(2, 0, 1)
    assert (images[0].int() - ref.int()).abs().float().mean() < 4  # the PNG, re-encoded at quality 90


def read_ranks(ds, world, batch, state=None, batches=None, **kw):
    """Every rank's (record id -> pixels) of its real samples, reading `batches` batches (all if
    None), from `state` if given; and rank 0's state_dict where it stopped."""
    got, after = {}, None
    for rank in range(world):
        loader = sk.Loader(ds, batch, size=32, rank=rank, world_size=world, **kw)
        if state is not None:
            loader.load_state_dict(state)
        for k, (images, _, ids, real) in enumerate(loader.batches()):
            for i in range(real):
                assert int(ids[i]) not in got, "record %d read twice" % int(ids[i])
                got[int(ids[i])] = images[i].clone()
            if batches is not None and k + 1 == batches:
                if rank == 0:
                    after = loader.state_dict()  # inside the iteration: its next batch
                break
        if rank == 0 and after is None:
            after = loader.state_dict()
    return got, after


@pytest.mark.parametrize("shuffle", ["full", "none", "block"])
def test_resuming_mid_epoch_on_another_world_size_continues_the_epoch(photo_ds, shuffle):
    ds, _ = photo_ds
    want, _ = read_ranks(ds, 2, 4, shuffle=shuffle)
    assert len(want) == 30
    # 2 ranks x 4 read 2 batches each; 3 ranks x 3, with another worker count, read the rest.
    before, state = read_ranks(ds, 2, 4, batches=2, shuffle=shuffle)
    assert len(before) == 16 and state["batch"] == 2 and state["world_size"] == 2
    after, end = read_ranks(ds, 3, 3, state=state, workers=1, shuffle=shuffle)
    assert sorted(set(before) | set(after)) == list(range(30)) and not set(before) & set(after)
    for record, px in list(before.items()) + list(after.items()):
        assert torch.equal(px, want[record]), "record %d: other pixels than the uninterrupted run's" % record
    assert end["epoch"] == 1 and end["batch"] == 0 and end["positions"] == []
    # A loader resumed on the rest of an epoch says so, and its len is the rest's.
    three = sk.Loader(ds, 3, size=32, rank=0, world_size=3, shuffle=shuffle)
    three.load_state_dict(state)
    # Strided shares read the order's first 16; block-local (contiguous) shares of 15
    # read 8 of each.
    rest = [[16, 30]] if shuffle != "block" else [[8, 15], [23, 30]]
    assert len(three) == 2 and three.state_dict()["positions"] == rest
    # Its sampler yields the ids its batches carry: the rest, not the epoch.
    ids = list(three.sampler)
    assert len(three.sampler) == len(ids) == 5  # 14 left over 3 ranks, padded to 15
    assert ids == [i for _, _, batch_ids, _ in three.batches() for i in batch_ids.tolist()]
    three.load_state_dict(state)
    three.set_epoch(1)  # another epoch: the whole of it
    assert three.state_dict()["positions"] == []
    # Another crop size mid-epoch: the epoch's crops would differ.
    with pytest.raises(ValueError, match="transform train 32x32 .* -> train 48x48"):
        sk.Loader(ds, 4, size=48, rank=0, world_size=2, shuffle=shuffle).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        sk.Loader(ds, 4, size=32, rank=0, world_size=2, seed=9, shuffle=shuffle).load_state_dict(state)


def test_loader_state_is_the_cores_and_is_checked_there(photo_ds, tmp_path):
    ds, _ = photo_ds
    a = sk.Loader(ds, 4, size=32, rank=0, world_size=1, shuffle="full")
    it = iter(a)
    next(it)
    state = a.state_dict()
    assert state["version"] == 6 and state["epoch"] == 0 and state["batch"] == 1
    assert state["shuffle"] == "full" and state["transform"].startswith("train 32x32")
    b = sk.Loader(ds, 4, size=32, rank=0, world_size=1, shuffle="full")
    b.load_state_dict(state)
    # The same cut: the epoch goes on at batch 1, len(b) the epoch's, the
    # sampler the rest of it.
    assert len(b) == len(a) and list(b.sampler) == list(a.sampler)[4:] and len(b.sampler) == len(a.sampler) - 4
    rest_b, rest_a = list(b), list(it)
    assert len(rest_b) == len(rest_a) == len(a) - 1
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(rest_b, rest_a))
    # A state written before the cut's fields were recorded (version 1) still resumes.
    old = {k: state[k] for k in ("epoch", "batch", "seed", "world_size", "batch_size", "records")}
    old["version"] = 1
    sk.Loader(ds, 4, size=32, rank=0, world_size=1, shuffle="full").load_state_dict(old)
    # Another dataset of as many records (the same images, packed in another
    # order): its positions would name other records.
    other = tmp_path / "other"
    src = sk.Dataset(ds)
    with sk.Writer(other, kind="jpeg", classes=src.classes) as w:
        for i in reversed(range(len(src))):
            w.add(src[i][0], src[i][1], key=src.key(i))
    with pytest.raises(ValueError, match="another dataset of %d records" % len(src)):
        sk.Loader(other, 4, size=32, rank=0, world_size=1, shuffle="full").load_state_dict(state)
    for broken, why in (({}, "'version' is missing"), (dict(state, version=99), "version 99"),
                        (dict(state, seed=-1), "'seed' is not a non-negative integer"),
                        (dict(state, batch=10**6), "past the epoch")):
        with pytest.raises(ValueError, match=why):
            sk.Loader(ds, 4, size=32, rank=0, world_size=1, shuffle="full").load_state_dict(broken)


def test_a_dataset_pickles_and_feeds_spawned_dataloader_workers(photo_ds, monkeypatch):
    ds, _ = photo_ds
    d = sk.Dataset(ds)
    copy = pickle.loads(pickle.dumps(d))
    assert len(copy) == len(d) and copy[3] == d[3] and copy.classes == d.classes
    monkeypatch.setenv("PYTHONPATH", os.path.join(BUILD, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    loader = torch.utils.data.DataLoader(d, batch_size=3, num_workers=1, multiprocessing_context="spawn",
                                         collate_fn=list)
    batch = next(iter(loader))
    assert len(batch) == 3 and batch[0] == d[0]


def test_the_example_script_refuses_an_unknown_arch_by_name():
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "examples", "train_imagenet.py"),
                        "--loader", "shardkit", "--data", "x", "--arch", "bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'bogus'" in r.stderr and "Traceback" not in r.stderr


def test_the_package_carries_type_information():
    pkg = os.path.join(BUILD, "python", "shardkit")
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    stub = open(os.path.join(pkg, "__init__.pyi")).read()
    for name in ("class Loader", "class Dataset", "class Writer", "def normalize", "def set_epoch"):
        assert name in stub, name
