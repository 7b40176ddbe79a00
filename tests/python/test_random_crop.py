"""RandomCrop(size, padding, pad_if_needed, fill, padding_mode) in the loader,
as CIFAR and SVHN scripts write it (RandomCrop(32, padding=4) with
RandomHorizontalFlip), on raw records and JPEGs: every sample equals
torchvision's RandomCrop and flip, pixel for pixel, run with the offset and
flip the loader drew, for every padding mode (constant with its fill, edge,
reflect, symmetric), on PIL images and on tensors; and any transform the
loader does not run is refused with one message shape that names it and
says what to do instead."""
import io
import re

import numpy as np
import pytest

from conftest import shardkit_module

sk = shardkit_module()
torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torchvision import transforms as TV  # noqa: E402
from torchvision.transforms import functional as F  # noqa: E402

T = sk.transforms


def write_raw(path, n, shape, seed=0):
    rng = np.random.default_rng(seed)
    with sk.Writer(path, kind="raw_u8", shape=shape, classes=["a", "b", "c"]) as w:
        for i in range(n):
            w.add(rng.integers(0, 256, shape, dtype=np.uint8), i % 3, key=str(i))
    return path


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """40 CIFAR-sized raw records of random pixels: every window of one is its own."""
    return write_raw(str(tmp_path_factory.mktemp("cifar") / "ds"), 40, (32, 32, 3))


def loader_samples(path, transform, epoch=0, **kw):
    """[(record HWC uint8, loader's CHW uint8 sample)] of an epoch, in order."""
    ds = sk.Dataset(path)
    loader = sk.Loader(path, 8, transform=transform, shuffle=False, rank=0, world_size=1, workers=2, **kw)
    loader.set_epoch(epoch)
    out = []
    for images, _, ids, real in loader.batches():
        for k in range(real):
            record = ds[int(ids[k])][0]
            if isinstance(record, bytes):  # a JPEG: PIL decodes it as torchvision's datasets do
                record = np.array(Image.open(io.BytesIO(record)).convert("RGB"))
            out.append((np.array(record), images[k].numpy().copy()))
    return out


def pil(record):
    """An HWC uint8 array as the PIL image a torchvision dataset gives ('L' for one channel)."""
    return Image.fromarray(record.squeeze(-1) if record.shape[-1] == 1 else record)


def torchvision_crop(record, crop, top, left, flip, as_tensor):
    """torchvision's RandomCrop (crop, a torchvision RandomCrop) with get_params
    returning (top, left), then RandomHorizontalFlip(p=1 if flip else 0), on a
    PIL image or a tensor, as a CHW uint8 array."""
    image = torch.from_numpy(record).permute(2, 0, 1).contiguous() if as_tensor else pil(record)
    original = TV.RandomCrop.get_params
    TV.RandomCrop.get_params = staticmethod(lambda img, size: (top, left, size[0], size[1]))
    try:
        out = TV.RandomHorizontalFlip(p=1.0 if flip else 0.0)(crop(image))
    finally:
        TV.RandomCrop.get_params = original
    if as_tensor:
        return out.numpy()
    out = np.array(out)
    return (out[:, :, None] if out.ndim == 2 else out).transpose(2, 0, 1)


def window_of(record, crop, sample):
    """The (top, left, flip) whose window of torchvision's padded image is the
    sample: the one there is (random pixels), found over every offset."""
    pad = pil(record)
    if crop.padding is not None:
        pad = F.pad(pad, crop.padding, crop.fill, crop.padding_mode)
    if crop.pad_if_needed:
        w, h = pad.size
        if w < crop.size[1]:
            pad = F.pad(pad, [crop.size[1] - w, 0], crop.fill, crop.padding_mode)
        if h < crop.size[0]:
            pad = F.pad(pad, [0, crop.size[0] - h], crop.fill, crop.padding_mode)
    padded = np.array(pad)
    padded = (padded[:, :, None] if padded.ndim == 2 else padded).transpose(2, 0, 1)
    th, tw = crop.size
    found = []
    for top in range(padded.shape[1] - th + 1):
        for left in range(padded.shape[2] - tw + 1):
            window = padded[:, top:top + th, left:left + tw]
            for flip in (False, True):
                if np.array_equal(window[:, :, ::-1] if flip else window, sample):
                    found.append((top, left, flip))
    return found


MODES = [
    ("constant, fill 0", dict(padding=4)),
    ("constant, fill per channel", dict(padding=4, fill=(10, 200, 30))),
    ("edge", dict(padding=4, padding_mode="edge")),
    ("reflect", dict(padding=4, padding_mode="reflect")),
    ("symmetric", dict(padding=(3, 5), padding_mode="symmetric")),
    ("reflect, left top right bottom", dict(padding=(1, 2, 6, 0), padding_mode="reflect")),
]


@pytest.mark.parametrize("name,args", MODES, ids=[m[0] for m in MODES])
def test_cifars_random_crop_gives_torchvisions_pixels_in_every_padding_mode(cifar, name, args):
    theirs = TV.RandomCrop(32, **args)
    offsets = set()
    for epoch in (0, 1):
        samples = loader_samples(cifar, TV.Compose([theirs, TV.RandomHorizontalFlip(), TV.ToTensor()]), epoch,
                                 layout="NHWC")
        assert len(samples) == 40
        for record, sample in samples:
            sample = (sample * 255).round().astype(np.uint8) if sample.dtype != np.uint8 else sample
            found = window_of(record, theirs, sample)
            assert len(found) == 1, (name, found)
            top, left, flip = found[0]
            offsets.add(found[0])
            assert np.array_equal(torchvision_crop(record, theirs, top, left, flip, False), sample), name
            if not isinstance(theirs.fill, tuple):  # torchvision 0.14 pads tensors with a number only
                assert np.array_equal(torchvision_crop(record, theirs, top, left, flip, True), sample), name
    # The offsets and flips are drawn: over 80 samples, many of the 2 x 81 windows.
    assert len(offsets) > 30 and {f for _, _, f in offsets} == {False, True}, offsets


def test_padding_wider_than_the_image_and_pad_if_needed_are_numpys(tmp_path):
    """Padding wider than a record mirrors as NumPy's pad does (torchvision's for
    PIL images); pad_if_needed pads a short side by the difference at both ends."""
    small = write_raw(str(tmp_path / "small"), 12, (5, 7, 1), seed=2)
    for args in (dict(size=(13, 9), padding=(10, 8), padding_mode="reflect"),
                 dict(size=(13, 9), padding=(10, 8), padding_mode="symmetric"),
                 dict(size=(12, 20), padding=(2, 1), pad_if_needed=True, padding_mode="reflect"),
                 dict(size=(12, 20), padding=1, pad_if_needed=True, fill=77),
                 dict(size=(9, 11), pad_if_needed=True, padding_mode="edge")):
        theirs = TV.RandomCrop(**args)
        for record, sample in loader_samples(small, [theirs, TV.RandomHorizontalFlip()]):
            assert sample.shape == (1,) + tuple(theirs.size), args
            found = window_of(record, theirs, sample)
            assert found, args
            top, left, flip = found[0]
            assert np.array_equal(torchvision_crop(record, theirs, top, left, flip, False), sample), args


def test_jpeg_records_are_cropped_from_the_whole_decoded_image(tmp_path):
    from test_binding import make_jpegs

    make_jpegs(str(tmp_path / "src"), n=12, seed=3)
    path = str(tmp_path / "ds")
    src = sorted((tmp_path / "src").rglob("*.jpg"))
    with sk.Writer(path, kind="jpeg", classes=["a"]) as w:
        for p in src:
            w.add(p.read_bytes(), 0, key=p.name)
    theirs = TV.RandomCrop(48, padding=4, padding_mode="reflect")
    for record, sample in loader_samples(path, TV.Compose([theirs, TV.RandomHorizontalFlip()])):
        found = window_of(record, theirs, sample)
        assert len(found) == 1, found
        assert np.array_equal(torchvision_crop(record, theirs, *found[0], False), sample)
    # A JPEG smaller than the crop fails its batch as torchvision fails, naming the record.
    with pytest.raises(sk.CorruptionError, match="RandomCrop 200x200 of an image of .*pad_if_needed=True"):
        list(sk.Loader(path, 4, transform=[T.RandomCrop(200)], shuffle=False, rank=0, world_size=1))


def test_random_crop_on_raw_records_is_checked_when_the_loader_opens(cifar):
    # RandomCrop and None are the transforms of raw records; the ones that resize are refused.
    with pytest.raises(ValueError, match="transform=None, or RandomCrop"):
        sk.Loader(cifar, 8, transform=[T.RandomResizedCrop(24)], rank=0, world_size=1)
    with pytest.raises(ValueError, match="RandomCrop 48x48 of an image of 32x32, 40x40 once padded"):
        sk.Loader(cifar, 8, transform=[T.RandomCrop(48, padding=4)], rank=0, world_size=1)
    with pytest.raises(ValueError, match="fill has 2 values.*3 channels"):
        sk.Loader(cifar, 8, transform=[T.RandomCrop(32, padding=4, fill=(1, 2))], rank=0, world_size=1)
    with pytest.raises(ValueError, match="padding_mode must be 'constant', 'edge', 'reflect' or 'symmetric'"):
        sk.Loader(cifar, 8, transform=[T.RandomCrop(32, padding=4, padding_mode="wrap")], rank=0, world_size=1)
    with pytest.raises(ValueError, match="crop padding must be in 0..16384, not -1"):
        sk.Loader(cifar, 8, transform=[T.RandomCrop(32, padding=-1)], rank=0, world_size=1)
    # The crops depend on (seed, epoch, position), not on the workers; a state records them.
    a = sk.Loader(cifar, 8, transform=[T.RandomCrop(32, padding=4)], shuffle=False, rank=0, world_size=1,
                  workers=1)
    b = sk.Loader(cifar, 8, transform=[T.RandomCrop(32, padding=4)], shuffle=False, rank=0, world_size=1,
                  workers=3)
    assert all(torch.equal(x, u) for (x, _), (u, _) in zip(a, b))
    assert a.state_dict()["transform"] == "crop 32x32 pad 4,4,4,4 constant fill 0 flip 0"


UNSUPPORTED = [
    (TV.ColorJitter(0.4, 0.4, 0.4), "ColorJitter", "apply it to the batch tensor after the loader"),
    (TV.RandomRotation(15), "RandomRotation", "apply it to the batch tensor after the loader"),
    (TV.Normalize((0.5,), (0.25,)), "Normalize", "images = shardkit.normalize\\(images, mean=\\[0.5\\]"),
    (TV.Pad(4), "Pad", "give the padding to RandomCrop"),
    (TV.FiveCrop(24), "FiveCrop", "apply it to the batch tensor after the loader"),
    (TV.GaussianBlur(3), "GaussianBlur", "apply it to the batch tensor after the loader"),
    (TV.Lambda(lambda x: x), "Lambda", "apply it to the batch tensor after the loader"),
    (lambda x: x, "<function", "apply it to the batch tensor after the loader"),
    ([TV.Resize(256, interpolation=TV.InterpolationMode.BICUBIC), TV.CenterCrop(224)], "Resize\\(interpolation=",
     "use the default interpolation"),
    ([TV.Resize(40)], "Resize\\(40\\) alone", "add CenterCrop"),
    ([TV.RandomCrop(32), TV.CenterCrop(24)], "RandomCrop \\+ CenterCrop", "the loader runs one geometry"),
    ([TV.RandomCrop(32), TV.RandomHorizontalFlip(), TV.RandomHorizontalFlip()], "a second RandomHorizontalFlip",
     "keep one"),
]


@pytest.mark.parametrize("transform,name,instead", UNSUPPORTED, ids=[u[1] for u in UNSUPPORTED])
def test_what_the_loader_does_not_run_is_refused_in_one_shape(cifar, transform, name, instead):
    with pytest.raises(ValueError) as e:
        sk.Loader(cifar, 8, transform=transform if isinstance(transform, list) else [TV.RandomCrop(32), transform],
                  rank=0, world_size=1)
    message = str(e.value)
    assert re.match("transform: %s.* does not run in shardkit's loader; " % name, message), message
    assert re.search(instead, message), message
