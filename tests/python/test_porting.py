"""Two training scripts in the style people run, each as its DataLoader
original and its shardkit port, checked record for record:

- a DDP bigMNIST script: a ConcatDataset of MNIST views, DistributedSampler,
  train_loader.sampler.set_epoch(epoch), the batch-size peek
  (len(next(iter(loader))[0])) and snapshots that resume mid-epoch;
- an ImageNet script: ImageFolder, RandomResizedCrop + flip for training,
  Resize + CenterCrop for validation on every rank (no sampler).

The ports change only the loader lines. Unshuffled, the port yields the
original's records in the original's order on every rank; shuffled, every
epoch is the dataset once over the ranks; resumed, the rest of the epoch
exactly, whatever the script does around the restored position."""
import gzip
import os
import subprocess

import numpy as np
import pytest

from conftest import shardkit_module, tool

sk = shardkit_module()
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torch.utils.data import ConcatDataset, DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from torchvision import transforms as TV  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
WORLD = 2


def _idx(path, n):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    arr = np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape).copy()
    return arr[:n]


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    """The original's ConcatDataset (the image, and the image mirrored: two
    views, as the study's script builds them) and the same records packed
    in ConcatDataset order for the port."""
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        pytest.skip("dataset-fashion-mnist not installed")
    images = _idx(os.path.join(FASHION, "train-images-idx3-ubyte.gz"), 150)
    labels = _idx(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"), 150).astype(np.int64)
    view_arrays = [images, images[:, :, ::-1].copy()]
    concat = ConcatDataset([TensorDataset(torch.from_numpy(v).unsqueeze(1), torch.from_numpy(labels))
                            for v in view_arrays])
    path = str(tmp_path_factory.mktemp("views") / "shards")
    with sk.Writer(path, kind="raw_u8", shape=(28, 28, 1), classes=[str(c) for c in range(10)],
                   shard_size=1 << 16) as w:
        for v in view_arrays:
            for img, label in zip(v, labels):
                w.add(img[:, :, None], int(label))
    return concat, path


def run_original(concat, rank, epochs, batch, shuffle):
    """The DataLoader script's loop: [(epoch, labels, pixels)] per step."""
    sampler = DistributedSampler(concat, num_replicas=WORLD, rank=rank, shuffle=shuffle, seed=0)
    loader = DataLoader(concat, batch_size=batch, sampler=sampler, num_workers=0)
    steps = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        b_sz = len(next(iter(loader))[0])
        assert b_sz == batch
        for x, y in loader:
            steps.append((epoch, y.tolist(), x.numpy().copy()))
    return steps


def run_port(path, rank, epochs, batch, shuffle, stop_at=None, snapshot=None, resume=None):
    """The port: the loader lines changed, the rest of the script as it was
    (sampler.set_epoch, the peek, snapshots). stop_at=(epoch, step): save a
    snapshot there and stop, as a preempted job does."""
    loader = sk.Loader(path, batch, transform=None, shuffle=shuffle, rank=rank, world_size=WORLD, seed=0,
                       workers=2)
    start_epoch = 0
    if resume is not None:
        start_epoch = resume["epoch"]
        loader.load_state_dict(resume["loader"])
    steps = []
    for epoch in range(start_epoch, epochs):
        loader.sampler.set_epoch(epoch)
        b_sz = len(next(iter(loader))[0])  # the peek: must not use up a restored position
        assert 0 < b_sz <= batch  # after a resume, the restored batch (the epoch's last may be short)
        for step, (x, y) in enumerate(loader):
            steps.append((epoch, y.tolist(), x.numpy().copy()))
            if stop_at == (epoch, step):
                snapshot.update({"epoch": epoch, "loader": loader.state_dict()})
                return steps
    return steps


def same(a, b):
    return len(a) == len(b) and all(ea == eb and ya == yb and np.array_equal(xa, xb)
                                    for (ea, ya, xa), (eb, yb, xb) in zip(a, b))


def test_bigmnist_port_gives_the_originals_records_in_its_order(views):
    concat, path = views
    for rank in range(WORLD):
        original = run_original(concat, rank, epochs=2, batch=16, shuffle=False)
        port = run_port(path, rank, epochs=2, batch=16, shuffle=False)
        assert same(original, port), "rank %d: the port's batches differ from DataLoader's" % rank


def test_bigmnist_port_shuffled_covers_each_epoch_once_over_the_ranks(views):
    concat, path = views
    n = len(concat)
    per_epoch = {}
    for rank in range(WORLD):
        loader = sk.Loader(path, 16, transform=None, shuffle=True, rank=rank, world_size=WORLD, seed=0)
        sampler = DistributedSampler(concat, num_replicas=WORLD, rank=rank, shuffle=True, seed=0)
        assert len(loader.sampler) == len(sampler)  # the same share per rank
        for epoch in range(3):
            loader.sampler.set_epoch(epoch)
            for _, _, ids, real in loader.batches():
                per_epoch.setdefault(epoch, []).extend(int(i) for i in ids[:real])
    for epoch, ids in per_epoch.items():
        assert sorted(ids) == list(range(n)), epoch
    assert per_epoch[0] != per_epoch[1]


@pytest.mark.parametrize("stop_at", [(0, 3), (1, 0), (1, 8)])
def test_bigmnist_port_resumes_the_rest_of_the_epoch_through_the_scripts_idioms(views, stop_at):
    _, path = views
    for rank in range(WORLD):
        whole = run_port(path, rank, epochs=2, batch=16, shuffle=True)
        snapshot = {}
        first = run_port(path, rank, epochs=2, batch=16, shuffle=True, stop_at=stop_at, snapshot=snapshot)
        rest = run_port(path, rank, epochs=2, batch=16, shuffle=True, resume=snapshot)
        assert same(whole, first + rest), "rank %d, stopped at %s" % (rank, stop_at)


def test_epoch_and_state_name_the_restored_epoch_until_it_is_read(views):
    _, path = views
    a = sk.Loader(path, 16, transform=None, rank=0, world_size=WORLD, seed=0)
    it = iter(a)
    for _ in range(3):
        next(it)
    state = a.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 3)
    del it
    b = sk.Loader(path, 16, transform=None, rank=0, world_size=WORLD, seed=0)
    b.load_state_dict(state)
    assert b.epoch == 0
    next(iter(b))  # a peek
    assert b.epoch == 0 and (b.state_dict()["epoch"], b.state_dict()["batch"]) == (0, 3)
    rest = [y.tolist() for _, y in b]  # no set_epoch: the restored epoch, from its batch
    assert len(rest) == len(b) - 3 and b.epoch == 1


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    from test_binding import make_jpegs

    root = tmp_path_factory.mktemp("imagenet")
    make_jpegs(str(root / "train"), n=48, seed=4)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "train"),
                    str(root / "shards")], check=True, capture_output=True)
    return str(root / "train"), str(root / "shards")


def test_imagenet_port_trains_on_every_file_once_per_epoch_with_imagefolders_labels(tree):
    folder, shards = tree
    original = torchvision.datasets.ImageFolder(folder)
    label_of = {os.path.relpath(p, folder): y for p, y in original.samples}
    train_tf = TV.Compose([TV.RandomResizedCrop(32), TV.RandomHorizontalFlip(), TV.ToTensor()])
    names = sk.Dataset(shards)
    assert names.classes == original.classes
    seen = []
    for rank in range(WORLD):
        loader = sk.Loader(shards, 8, transform=train_tf, shuffle=True, rank=rank, world_size=WORLD)
        loader.sampler.set_epoch(0)
        assert len(loader.dataset) == len(original)
        for images, labels, ids, real in loader.batches():
            assert images.shape[1:] == (3, 32, 32) and images.dtype == torch.float32  # ToTensor's
            assert 0 <= float(images.min()) and float(images.max()) <= 1
            for i in range(real):
                key = names.key(int(ids[i]))
                seen.append(key)
                assert int(labels[i]) == label_of[key], key
    assert sorted(seen) == sorted(label_of)


def test_imagenet_port_validates_on_the_whole_set_on_every_rank_with_torchvisions_pixels(tree, monkeypatch):
    from PIL import Image

    folder, shards = tree
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", str(WORLD))
    val_tf = TV.Compose([TV.Resize(36), TV.CenterCrop(32), TV.ToTensor()])
    split = sk.Loader(shards, 8, transform=val_tf, shuffle=False)  # the world from the environment
    whole = sk.Loader(shards, 8, transform=val_tf, shuffle=False, distributed=False)
    assert split.samples_per_epoch == 24 and whole.samples_per_epoch == 48
    names = sk.Dataset(shards)
    reference = TV.Compose([TV.Resize(36), TV.CenterCrop(32), TV.PILToTensor()])
    diffs, keys = [], []
    for images, _, ids, real in whole.batches():
        for i in range(real):
            key = names.key(int(ids[i]))
            keys.append(key)
            ref = reference(Image.open(os.path.join(folder, key)).convert("RGB")).numpy()
            assert images.dtype == torch.float32  # ToTensor(): torchvision's 0-1 floats
            diffs.append(np.abs(ref.astype(np.float64) - images[i].numpy() * 255.0).mean())
    assert len(keys) == 48 and len(set(keys)) == 48
    assert np.mean(diffs) < 0.5, np.mean(diffs)


def test_what_cannot_apply_is_an_error_that_names_what_works(views, tree):
    _, raw = views
    _, jpeg = tree
    for transform in ("train", "resize", [sk.transforms.RandomResizedCrop(28)]):
        with pytest.raises(ValueError, match="transform=None"):
            sk.Loader(raw, 8, transform=transform, rank=0, world_size=1)
    with pytest.raises(ValueError, match="the default"):
        sk.Loader(raw, 8, rank=0, world_size=1)
    # No geometry: raw records as stored (ToTensor: as torchvision's floats,
    # PILToTensor: uint8, value for value); JPEGs need one size.
    as_stored = sk.Loader(raw, 8, transform=None, shuffle=False, rank=0, world_size=1)
    u, _ = next(iter(as_stored))
    u = u.clone()
    x, _ = next(iter(sk.Loader(raw, 8, transform=TV.Compose([TV.ToTensor()]), shuffle=False, rank=0,
                               world_size=1)))
    assert x.shape == (8, 1, 28, 28) and x.dtype == torch.float32
    assert torch.equal(x, u.to(torch.float32).div(255)), "ToTensor's values, bit for bit"
    p, _ = next(iter(sk.Loader(raw, 8, transform=TV.Compose([TV.PILToTensor()]), shuffle=False, rank=0,
                               world_size=1)))
    assert p.dtype == torch.uint8 and torch.equal(p, u)
    if hasattr(TV, "ConvertImageDtype"):
        c, _ = next(iter(sk.Loader(raw, 8, transform=TV.Compose([TV.ConvertImageDtype(torch.float64)]),
                                   shuffle=False, rank=0, world_size=1)))
        assert c.dtype == torch.float64 and torch.equal(c, TV.ConvertImageDtype(torch.float64)(u))
    with pytest.raises(ValueError, match="RandomResizedCrop"):
        sk.Loader(jpeg, 8, transform=TV.Compose([TV.ToTensor()]), rank=0, world_size=1)
    # Refusals say what to do with the torchvision that is installed, on any device.
    for t in (TV.RandomRotation(20), TV.ElasticTransform(30.0) if hasattr(TV, "ElasticTransform") else None):
        if t is None:
            continue
        with pytest.raises(ValueError) as e:
            sk.Loader(jpeg, 8, transform=TV.Compose([TV.RandomResizedCrop(32), t]), rank=0, world_size=1)
        assert "v2" not in str(e.value) and ".cuda()" not in str(e.value) and "after the loader" in str(e.value)
    with pytest.raises(ValueError, match="distributed=False"):
        sk.Loader(jpeg, 8, transform="val", size=32, rank=0, world_size=2, distributed=False)


def test_a_python_without_torch_is_told_which_interpreter_and_what_to_do(views):
    _, raw = views
    script = ("import sys; sys.modules['torch'] = None\n"
              "import shardkit\n"
              "shardkit.Dataset(sys.argv[1])  # works without torch\n"
              "try:\n"
              "    shardkit.Loader(sys.argv[1], 8, transform=None, rank=0, world_size=1)\n"
              "except ImportError as e:\n"
              "    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(sk.__file__)))
    out = subprocess.run(["/usr/bin/python3", "-c", script, raw], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "/usr/bin/python3" in out.stdout and "cannot import torch" in out.stdout, out.stdout


def test_a_superseded_iteration_raises_without_taking_the_newer_ones_batch(views):
    _, path = views
    loader = sk.Loader(path, 16, transform=None, shuffle=False, rank=0, world_size=1, seed=0)
    whole = [ids.tolist() for _, _, ids, _ in loader.batches()]
    old = loader.batches()
    next(old)
    new = loader.batches()  # the same epoch again, from its start
    first = next(new)[2].tolist()
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)
    rest = [ids.tolist() for _, _, ids, _ in new]
    assert [first] + rest == whole


def test_normalize_takes_torchvisions_scalars_and_refusing_normalize_gives_its_replacement(views):
    """An MNIST script's Normalize((0.1307,), (0.3081,)) moves into the loop,
    scalar or not, with the message saying the line that replaces it."""
    _, path = views
    x, _ = next(iter(sk.Loader(path, 8, transform=None, shuffle=False, rank=0, world_size=1)))
    theirs = TV.Normalize(0.1307, 0.3081)(TV.ConvertImageDtype(torch.float32)(x))
    for mean, std in ((0.1307, 0.3081), ((0.1307,), (0.3081,)), ([0.1307], [0.3081])):
        assert torch.allclose(sk.normalize(x, mean, std), theirs, atol=1e-5)
    for t in (TV.Normalize(0.1307, 0.3081), TV.Normalize((0.1307,), (0.3081,))):
        with pytest.raises(ValueError) as e:
            sk.Loader(path, 8, transform=TV.Compose([TV.ToTensor(), t]), rank=0, world_size=1)
        assert "shardkit.normalize(images, mean=[0.1307], std=[0.3081])" in str(e.value), str(e.value)
        assert "leaving it out" in str(e.value)


def test_auto_shuffle_says_once_which_mode_it_chose_and_why(views, caplog, tmp_path):
    import shutil

    path = str(tmp_path / "copy")  # not yet opened in this process: the message is due
    shutil.copytree(views[1], path)
    caplog.set_level("INFO", logger="shardkit")
    for _ in range(2):
        loader = sk.Loader(path, 8, transform=None, rank=0, world_size=1)  # shuffle="auto"
    said = [r.getMessage() for r in caplog.records if "shuffle='auto'" in r.getMessage()]
    assert len(said) == 1, said
    assert "chose a full shuffle" in said[0] and "fits the block cache" in said[0], said[0]
    assert loader.shuffle_mode == "full"
    caplog.clear()
    sk.Loader(path, 8, transform=None, shuffle="full", rank=0, world_size=1)
    assert not [r for r in caplog.records if "shuffle=" in r.getMessage()], "asked for: nothing to say"


def test_the_sampler_iterates_as_a_distributed_samplers_indices(views):
    """list(loader.sampler): this rank's record ids of the epoch the next
    iteration reads, in order, padding included, as DistributedSampler's
    indices; the same ids the batches carry, read or not."""
    concat, path = views
    for shuffle in (False, True):
        for rank in range(WORLD):
            loader = sk.Loader(path, 16, transform=None, shuffle=shuffle, rank=rank, world_size=WORLD, seed=0)
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                indices = list(loader.sampler)
                assert len(indices) == len(loader.sampler) and all(isinstance(i, int) for i in indices)
                ids = [i for _, _, batch_ids, _ in loader.batches() for i in batch_ids.tolist()]
                assert indices == ids, (shuffle, rank, epoch)
            if not shuffle:
                sampler = DistributedSampler(concat, num_replicas=WORLD, rank=rank, shuffle=False)
                assert indices == list(sampler), "unshuffled: DistributedSampler's order"
