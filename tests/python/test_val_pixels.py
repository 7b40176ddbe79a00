"""The loader's val transform gives torchvision's pixels: Resize(256) +
CenterCrop(224) on the same JPEGs, real photographs of ImageNet's sizes
(odd margins included), at 224 px and at the small sizes of quick experiments.
The val transform decodes at full resolution, as torchvision does, and
resamples with a PIL-style antialiased filter, so pixels differ by rounding,
not geometry, at every size."""
import os
import random
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import tool

torchvision = pytest.importorskip("torchvision")
from torchvision import transforms  # noqa: E402

# ImageNet-like sizes, many with odd margins after Resize(256) (341, 383 ...).
SIZES = [(500, 375), (375, 500), (640, 427), (427, 640), (500, 333), (333, 500), (500, 374),
         (800, 600), (257, 256), (259, 300), (1024, 683), (300, 225)]


def make_photo_set(photos, root, n=50, seed=0):
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, "c0"))
    paths = []
    for k in range(n):
        src = Image.open(photos[k % len(photos)]).convert("RGB")
        w, h = SIZES[k % len(SIZES)] if k < 2 * len(SIZES) else (rng.randint(240, 900), rng.randint(240, 900))
        scale = max(w / src.width, h / src.height)
        big = src.resize((max(w, round(src.width * scale)), max(h, round(src.height * scale))), Image.BICUBIC)
        x, y = rng.randint(0, big.width - w), rng.randint(0, big.height - h)
        path = os.path.join(root, "c0", "%03d.JPEG" % k)
        big.crop((x, y, x + w, y + h)).save(path, quality=90)
        paths.append(path)
    return paths


def read_dump(path):
    with open(path, "rb") as f:
        n, c, h, w = map(int, f.readline().split())
        rows = [f.readline().decode().split(" ", 2) for _ in range(n)]
        pixels = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, c, h, w)
    return [r[2].strip() for r in rows], pixels


# 224: ImageNet's val; 64 and 32: the small sizes of quick experiments, where
# the decoder's DCT downscaling would dominate if it were allowed to.
@pytest.mark.parametrize("size", [224, 64, 32])
def test_val_pixels_match_torchvision(photos, tmp_path, size):
    make_photo_set(photos, str(tmp_path / "jpegs"))
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(tmp_path / "jpegs"),
                    str(tmp_path / "ds")], check=True, capture_output=True)
    subprocess.run([tool("tests", "loader_dump"), str(tmp_path / "ds"), str(tmp_path / "dump"),
                    "--transform", "val", "--size", str(size)], check=True)
    keys, ours = read_dump(str(tmp_path / "dump"))
    assert len(keys) == 50
    resize = round(size / 0.875)  # the val transform's Resize: round(size / 0.875), 256 for 224
    tv = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(size), transforms.PILToTensor()])
    diffs = []
    for key, mine in zip(keys, ours):
        ref = tv(Image.open(str(tmp_path / "jpegs" / key)).convert("RGB")).numpy()
        diffs.append(np.abs(ref.astype(np.int16) - mine.astype(np.int16)).mean())
    mean = float(np.mean(diffs))
    print("%d px: mean |diff| over %d photos: %.3f (worst photo %.3f)" % (size, len(diffs), mean, max(diffs)))
    # The same parity at every size (about 0.1 grey levels: rounding).
    assert mean < 0.5, "mean |diff| %.3f: the val transform is not torchvision's" % mean
    # A crop one pixel off gives several units of difference on real photos.
    assert max(diffs) < 1.0, "worst photo %.3f" % max(diffs)
