"""An output size per epoch (FFCV's low-resolution first epochs): one loader
whose size changes between epochs gives, at each size, the pixels of a loader
made at that size, which are torchvision's; the size is part of its state, so
a resume mid-schedule continues with the same pixels. Run with Debian's
/usr/bin/python3 (torch, torchvision)."""
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import shardkit_module, tool
from test_val_pixels import make_photo_set

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torchvision import transforms  # noqa: E402

shardkit = shardkit_module()


@pytest.fixture(scope="module")
def photo_set(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("resolution")
    paths = make_photo_set(photos, str(root / "jpegs"), n=24)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "jpegs"), str(root / "ds")],
                   check=True, capture_output=True)
    return str(root / "ds"), sorted(paths)


def epoch_batches(loader, epoch):
    loader.set_epoch(epoch)
    return [(x.clone(), y.clone(), ids.clone()) for x, y, ids, _ in loader.batches()]


def test_schedule_is_ffcvs_ramp_and_checks_its_arguments():
    s = shardkit.ResolutionSchedule(160, 192, 65, 76)
    assert [s(e) for e in range(60, 80)] == [160] * 11 + [192] * 9
    ramp = shardkit.ResolutionSchedule(128, 224, 0, 8)
    assert [ramp(e) for e in range(10)] == [128, 128, 160, 160, 192, 192, 192, 224, 224, 224]
    assert (ramp.min_size, ramp.max_size, ramp.start_epoch, ramp.end_epoch) == (128, 224, 0, 8)
    assert repr(ramp) == "ResolutionSchedule(128, 224, 0, 8)"
    for args, why in [((192, 160, 0, 5), "MIN is larger than MAX"), ((160, 192, 9, 5), "START is after END"),
                      ((8, 64, 0, 1), "16..4096")]:
        with pytest.raises(ValueError, match=why):
            shardkit.ResolutionSchedule(*args)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        ramp(-1)


@pytest.mark.parametrize("transform", ["train", "val"])
def test_each_epoch_is_a_loader_made_at_its_size(photo_set, transform):
    path, _ = photo_set
    schedule = shardkit.ResolutionSchedule(64, 128, 1, 3)  # 64, 64, 96, 128
    scheduled = shardkit.Loader(path, 8, transform=transform, size=schedule, seed=4, workers=2,
                                rank=0, world_size=1)
    for epoch in range(4):
        got = epoch_batches(scheduled, epoch)
        side = schedule(epoch)
        assert scheduled.shape == (3, side, side)
        fresh = shardkit.Loader(path, 8, transform=transform, size=side, seed=4, workers=1, rank=0,
                                world_size=1)
        want = epoch_batches(fresh, epoch)
        assert len(got) == len(want) == 3
        for (x, y, ids), (wx, wy, wids) in zip(got, want):
            assert x.shape == (8, 3, side, side)
            assert torch.equal(ids, wids) and torch.equal(y, wy)
            assert torch.equal(x, wx), "epoch %d at %d px: not the pixels of a loader made at that size" % (
                epoch, side)


def test_sizes_set_between_epochs_give_torchvisions_val_pixels(photo_set):
    path, paths = photo_set
    keys = shardkit.Dataset(path)
    by_name = {p.split("/")[-1]: p for p in paths}
    loader = shardkit.Loader(path, 24, transform="val", size=224, shuffle=False, rank=0, world_size=1)
    for side in [224, 192, 160, 128, 64]:
        loader.set_size(side)
        (images, _, ids, _), = list(loader.batches())
        tv = transforms.Compose([transforms.Resize(round(side / 0.875)), transforms.CenterCrop(side),
                                 transforms.PILToTensor()])
        diffs = []
        for k, i in enumerate(ids.tolist()):
            ref = tv(Image.open(by_name[keys.key(i).split("/")[-1]]).convert("RGB")).numpy().astype(np.int16)
            diffs.append(np.abs(ref - images[k].numpy().astype(np.int16)).mean())
        # Rounding only (test_val_pixels.py: about 0.1 grey levels); a crop a
        # pixel off or a stale size would be several.
        assert np.mean(diffs) < 0.5 and max(diffs) < 1.0, (side, np.mean(diffs), max(diffs))


def test_a_resume_mid_schedule_continues_at_the_saved_size(photo_set):
    path, _ = photo_set
    schedule = shardkit.ResolutionSchedule(64, 128, 0, 2)  # 64, 96, 128

    def make():
        return shardkit.Loader(path, 4, transform="train", size=schedule, seed=9, workers=2, rank=0,
                               world_size=1)

    whole = make()
    want = {e: epoch_batches(whole, e) for e in range(3)}
    first = make()
    first.set_epoch(1)
    it = first.batches()
    for _ in range(2):  # two of epoch 1's six batches
        next(it)
    state = first.state_dict()
    it.close()
    assert state["size"] == 96
    again = make()  # a restarted job: made at the schedule's epoch-0 size
    again.load_state_dict(state)
    assert again.shape == (3, 96, 96)
    rest = [(x, y, ids) for x, y, ids, _ in again.batches()]
    assert len(rest) == 4
    for (x, _, ids), (wx, _, wids) in zip(rest, want[1][2:]):
        assert torch.equal(ids, wids) and torch.equal(x, wx)
    # The next epoch follows the schedule again.
    nxt = [x for x, _, _, _ in again.batches()]
    assert again.shape == (3, 128, 128)
    assert all(torch.equal(a, b[0]) for a, b in zip(nxt, want[2]))


def test_size_changes_only_between_iterations(photo_set):
    path, _ = photo_set
    loader = shardkit.Loader(path, 4, transform="train", size=64, rank=0, world_size=1)
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match="between epochs"):
        loader.set_size(32)
    for _ in it:
        pass
    loader.set_size(32)
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 32, 32)
    with pytest.raises(ValueError, match="1..4096"):
        loader.set_size(0)
