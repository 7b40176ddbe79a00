"""torchvision's geometric transforms, run by shardkit's C++ workers.

The loader decodes each JPEG straight into the region a transform needs and
resamples it once, so it takes the transforms a training script already
writes, with torchvision's names, parameters and pixels (bilinear,
antialiased as PIL does; within about one grey level of torchvision on real
photographs):

    from shardkit import transforms as T
    train = T.Compose([T.RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
                       T.RandomHorizontalFlip(p=0.5)])
    val = T.Compose([T.Resize(256), T.CenterCrop(224)])
    squash = T.Compose([T.Resize((224, 224)), T.RandomHorizontalFlip()])
    loader = shardkit.Loader(path, 256, transform=train)

torchvision's own objects work too (``transform=torchvision.transforms.Compose
([...])``): they are translated, and whatever cannot run in the loader is
refused with a message that says where it belongs instead.

What the loader runs: one geometry, then an optional horizontal flip:
  RandomResizedCrop(size, scale, ratio)            random area and aspect
  Resize(int or (h, w)) + CenterCrop(size)         resize, then the centre
  Resize((h, w))                                   the whole image, squashed
  RandomCrop(size, padding, pad_if_needed, fill,   pad, then a window at a random
             padding_mode)                         offset: pixels copied, equal to
                                                   torchvision's (raw records too)
  RandomHorizontalFlip(p)                          after any of those
The batch is then uint8 [B, C, H, W]; with ToTensor() (or ConvertImageDtype /
ToDtype to a float type) in the Compose it is float in 0-1, torchvision's
values exactly (x.to(float32) / 255, made on the host: for speed leave it
out and convert or normalise the uint8 batch on the GPU). Everything else runs after the loader,
on the batch tensor, on whatever device it is on: torchvision's transforms
(0.14's included) take tensors, e.g. ColorJitter, RandomRotation,
ElasticTransform, RandomErasing, AutoAugment (one random draw per call: for a
draw per sample, apply them per image). Normalisation: shardkit.normalize
(torchvision's 0-1 mean/std as written). With no geometry at all (only
ToTensor and the like), raw records come as stored; JPEGs need a geometry
(their sizes differ, a batch needs one).

On raw records (IDX, HDF5, MATLAB, bigMNIST) the transforms are None (the
records as stored) and RandomCrop (with or without RandomHorizontalFlip): the
others resize, which only JPEG records take.

Anything else is refused with one message shape, naming the transform and
what to do instead: "transform: NAME does not run in shardkit's loader;
apply it to the batch tensor after the loader ..." (or the replacement, such
as shardkit.normalize for Normalize).
"""
import logging

__all__ = ["Compose", "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
           "plan"]

# What the loader runs, for the messages.
_RUNS = "RandomResizedCrop, Resize, CenterCrop, RandomCrop and RandomHorizontalFlip"
_AFTER = ("apply it to the batch tensor after the loader (uint8 [B, C, H, W], on its device: torchvision's "
          "transforms take tensors)")


def _refused(name, instead):
    """The one shape of a refusal: the transform, then what to do instead."""
    return ValueError("transform: %s does not run in shardkit's loader; %s" % (name, instead))


def _size_pair(name, size):
    """torchvision's size argument as (h, w): an int, or a sequence of 1 or 2."""
    if isinstance(size, bool):
        raise ValueError("%s size must be an int or (h, w), not %r" % (name, size))
    if isinstance(size, int):
        return size, size
    try:
        seq = [int(v) for v in size]
    except (TypeError, ValueError):
        raise ValueError("%s size must be an int or (h, w), not %r" % (name, size)) from None
    if len(seq) == 1:
        return seq[0], seq[0]
    if len(seq) == 2:
        return seq[0], seq[1]
    raise ValueError("%s size must be an int or (h, w), not %r" % (name, size))


def _range(name, value):
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a pair (min, max), not %r" % (name, value)) from None
    return lo, hi  # its range is checked by the loader (one validation, in C++)


def _check_interpolation(owner, interpolation):
    """shardkit resamples bilinearly, antialiased (torchvision's default for
    images): other filters would give other pixels, so they are refused."""
    if interpolation is None:
        return
    name = getattr(interpolation, "name", None) or getattr(interpolation, "value", None) or str(interpolation)
    if str(name).lower() not in ("bilinear", "interpolationmode.bilinear", "2"):
        raise _refused("%s(interpolation=%s)" % (owner, name),
                       "use the default interpolation: the loader resamples bilinearly (antialiased, as "
                       "torchvision does for PIL images)")


class RandomResizedCrop:
    """torchvision.transforms.RandomResizedCrop: a random area (``scale``, a
    fraction of the image) and aspect (``ratio``, width/height, drawn
    log-uniformly), resized to ``size``."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation=None,
                 antialias=True):
        self.size = _size_pair("RandomResizedCrop", size)
        self.scale = _range("RandomResizedCrop scale", scale)
        self.ratio = _range("RandomResizedCrop ratio", ratio)
        _check_interpolation("RandomResizedCrop", interpolation)

    def __repr__(self):
        return "RandomResizedCrop(size=%r, scale=%r, ratio=%r)" % (self.size, self.scale, self.ratio)


class Resize:
    """torchvision.transforms.Resize: an int resizes the short side to it
    (the aspect kept), (h, w) resizes to exactly that (squashed)."""

    def __init__(self, size, interpolation=None, max_size=None, antialias=True):
        if max_size is not None:
            raise _refused("Resize(max_size=%r)" % (max_size,),
                           "use Resize((h, w)), or Resize(n) + CenterCrop(n): a batch needs one size")
        _check_interpolation("Resize", interpolation)
        if isinstance(size, int) and not isinstance(size, bool):
            self.short, self.size = size, None
        else:
            try:
                seq = list(size)
            except TypeError:
                raise ValueError("Resize size must be an int or (h, w), not %r" % (size,)) from None
            if len(seq) == 1:
                self.short, self.size = int(seq[0]), None
            else:
                self.short, self.size = None, _size_pair("Resize", seq)

    def __repr__(self):
        return "Resize(%r)" % (self.short if self.short is not None else self.size,)


class CenterCrop:
    """torchvision.transforms.CenterCrop: the centre ``size`` of the image."""

    def __init__(self, size):
        self.size = _size_pair("CenterCrop", size)

    def __repr__(self):
        return "CenterCrop(%r)" % (self.size,)


def _padding(padding):
    """torchvision's padding (an int, or 1, 2 or 4 numbers) as [left, top, right, bottom]."""
    if padding is None:
        return [0, 0, 0, 0]
    if isinstance(padding, (int, float)) and not isinstance(padding, bool):
        return [padding] * 4
    try:
        seq = list(padding)
    except TypeError:
        raise ValueError("RandomCrop padding must be an int or 1, 2 or 4 ints, not %r" % (padding,)) from None
    if len(seq) == 1:
        return seq * 4
    if len(seq) == 2:  # left/right, top/bottom
        return [seq[0], seq[1], seq[0], seq[1]]
    if len(seq) == 4:
        return seq
    raise ValueError("RandomCrop padding must be an int or 1, 2 or 4 ints, not %r" % (padding,))


class RandomCrop:
    """torchvision.transforms.RandomCrop: the image padded by ``padding`` (an
    int, (left/right, top/bottom) or (left, top, right, bottom)) in
    ``padding_mode`` ('constant' with ``fill``, a number or one per channel;
    'edge', 'reflect', 'symmetric'), then, with ``pad_if_needed``, a side
    still shorter than ``size`` padded by the difference at both ends; then a
    ``size`` window at a random offset. Pixels are copied, as torchvision
    copies them: equal to torchvision's for the same offset. CIFAR's and
    SVHN's ``RandomCrop(32, padding=4)``, on raw records too."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        self.size = _size_pair("RandomCrop", size)
        self.padding = _padding(padding)  # ranges are checked by the loader
        self.pad_if_needed = bool(pad_if_needed)
        if isinstance(fill, dict):  # v2's per-type fill
            raise ValueError("RandomCrop fill must be a number or one per channel, not %r" % (fill,))
        self.fill = list(fill) if isinstance(fill, (list, tuple)) else [0 if fill is None else fill]
        self.padding_mode = str(padding_mode)

    def __repr__(self):
        return "RandomCrop(size=%r, padding=%r, pad_if_needed=%r, fill=%r, padding_mode=%r)" % (
            self.size, self.padding, self.pad_if_needed, self.fill, self.padding_mode)


class RandomHorizontalFlip:
    """torchvision.transforms.RandomHorizontalFlip: mirror with probability ``p``."""

    def __init__(self, p=0.5):
        self.p = float(p)  # checked by the loader: in [0, 1]

    def __repr__(self):
        return "RandomHorizontalFlip(p=%r)" % self.p


class Compose:
    """torchvision.transforms.Compose: the transforms in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __repr__(self):
        return "Compose(%r)" % (self.transforms,)


# torchvision transforms that do nothing to a uint8 batch's geometry: the
# loader's output already is what they would make (a uint8 CHW tensor), or
# its floats (ToFloat).
_NO_OPS = {"ToTensor", "PILToTensor", "ToImage", "ToImageTensor", "ToPureTensor", "ConvertImageDtype",
           "ToDtype", "Identity"}


class ToFloat:
    """The uint8 batch as floats of ``dtype``, divided by 255 when ``scale``:
    what torchvision's ToTensor (float32 in 0-1), ConvertImageDtype(float) and
    ToDtype(float, scale=True) give, value for value (x.to(dtype) / 255). The
    loader does it on the host, after the batch is made."""

    def __init__(self, dtype=None, scale=True):
        self.dtype, self.scale = dtype, scale

    def __repr__(self):
        return "ToFloat(dtype=%r, scale=%r)" % (self.dtype, self.scale)


def _to_float(t, name):
    """ToFloat for a torchvision dtype conversion, or None where it keeps uint8."""
    import torch

    if name == "ToTensor":
        return ToFloat(torch.get_default_dtype(), True)
    dtype = getattr(t, "dtype", None)
    if isinstance(dtype, dict):  # v2's ToDtype({tv_tensors.Image: torch.float32, ...})
        dtype = next(iter(dtype.values()), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        return None
    return ToFloat(dtype, bool(getattr(t, "scale", True)) if name == "ToDtype" else True)


def _values(v):
    """Normalize's mean or std as a list (torchvision takes a number too)."""
    return list(v) if isinstance(v, (list, tuple)) else [float(v)]
_ON_GPU = {"ColorJitter", "RandomGrayscale", "Grayscale", "GaussianBlur", "RandomErasing", "AutoAugment",
           "RandAugment", "TrivialAugmentWide", "AugMix", "RandomAdjustSharpness", "RandomAutocontrast",
           "RandomEqualize", "RandomInvert", "RandomPosterize", "RandomSolarize", "MixUp", "CutMix",
           "RandomPhotometricDistort", "ElasticTransform", "RandomVerticalFlip", "RandomRotation",
           "RandomAffine", "RandomPerspective", "Lambda", "RandomApply", "RandomChoice", "RandomOrder"}


# What to do instead of torchvision transforms that have a better answer than
# "after the loader".
_INSTEAD = {
    "Pad": "give the padding to RandomCrop (Pad(p) + RandomCrop(n) is RandomCrop(n, padding=p)), or pad the "
           "batch tensor after the loader",
    "FiveCrop": _AFTER + "; FiveCrop and TenCrop make several images of one",
    "TenCrop": _AFTER + "; FiveCrop and TenCrop make several images of one",
}


def _translate(t):
    """A torchvision (v1 or v2) transform as ours, or a ValueError that says
    where it belongs."""
    if isinstance(t, (Compose, RandomResizedCrop, Resize, CenterCrop, RandomCrop, RandomHorizontalFlip)):
        return t
    name = type(t).__name__
    module = type(t).__module__ or ""
    if not module.startswith("torchvision"):
        raise _refused("%r (not a torchvision or shardkit.transforms transform)" % (t,),
                       _AFTER + ", or write the geometry with torchvision's " + _RUNS)
    if name == "Compose":
        return Compose([_translate(x) for x in t.transforms])
    if name == "RandomResizedCrop":
        return RandomResizedCrop(t.size, t.scale, t.ratio, getattr(t, "interpolation", None))
    if name == "Resize":
        return Resize(t.size, getattr(t, "interpolation", None), getattr(t, "max_size", None))
    if name == "CenterCrop":
        return CenterCrop(t.size)
    if name == "RandomHorizontalFlip":
        return RandomHorizontalFlip(t.p)
    if name == "RandomCrop":
        return RandomCrop(t.size, getattr(t, "padding", None), getattr(t, "pad_if_needed", False),
                          getattr(t, "fill", 0), getattr(t, "padding_mode", "constant"))
    if name in _NO_OPS:
        return _to_float(t, name) if name in ("ToTensor", "ConvertImageDtype", "ToDtype") else None
    if name == "Normalize":
        raise _refused("Normalize", "apply it to the batch after the loader: take it out of the transform and "
                       "add, in the training loop, images = shardkit.normalize(images, mean=%s, std=%s) (on the "
                       "uint8 batch, on the GPU after images.cuda(non_blocking=True) where there is one: uint8 "
                       "is 4x fewer bytes to copy); leaving it out trains on unnormalised inputs"
                       % (_values(t.mean), _values(t.std)))
    if name in _ON_GPU:
        raise _refused(name, _AFTER + " (one random draw per call; for a draw per sample: "
                       "torch.stack([t(img) for img in images]))")
    raise _refused(name, _INSTEAD.get(name, _AFTER + "; the loader runs " + _RUNS))


_log = logging.getLogger("shardkit")
_warned = set()


def _once_warn(message):
    if message not in _warned:
        _warned.add(message)
        _log.warning(message)


def _flatten(t, out):
    if isinstance(t, Compose):
        for x in t.transforms:
            _flatten(x, out)
    elif isinstance(t, (list, tuple)):
        for x in t:
            _flatten(_translate(x), out)
    elif t is not None:
        out.append(t)
    return out


def plan(transform, size=224):
    """The C++ loader's transform parameters for ``transform``: 'train',
    'val', 'resize', None (or 'none'), a shardkit.transforms or torchvision
    transform, Compose or list. ``size`` is the output side of the named ones."""
    if transform is None or isinstance(transform, str):  # a name: the loader checks it
        return {"kind": "none" if transform is None else transform, "size": int(size)}
    if not isinstance(transform, (list, tuple)):
        transform = _translate(transform)
    ops = _flatten(transform, [])
    floats = [op for op in ops if isinstance(op, ToFloat)]
    ops = [op for op in ops if not isinstance(op, ToFloat)]
    p = _plan(ops, size)
    if floats:
        p["to_float"] = (floats[-1].dtype, floats[-1].scale)  # the Loader's, not the core's
    return p


def _plan(ops, size):
    flips = [op for op in ops if isinstance(op, RandomHorizontalFlip)]
    geometry = [op for op in ops if not isinstance(op, RandomHorizontalFlip)]
    if len(flips) > 1:
        raise _refused("a second RandomHorizontalFlip", "keep one (two flips of p are one of 2p(1-p))")
    flip = flips[0].p if flips else 0.0
    shapes = [type(op).__name__ for op in geometry]
    if shapes == ["RandomResizedCrop"]:
        (h, w), op = geometry[0].size, geometry[0]
        return {"kind": "train", "size": h, "height": h, "width": w, "scale": op.scale, "ratio": op.ratio,
                "flip": flip}
    if shapes == ["Resize", "CenterCrop"]:
        resize, (h, w) = geometry[0], geometry[1].size
        p = {"kind": "val", "size": h, "height": h, "width": w, "flip": flip}
        if resize.short is not None:
            p["resize"] = resize.short
        else:
            p["resize_hw"] = resize.size
        return p
    if shapes == ["Resize"] and geometry[0].size is not None:
        h, w = geometry[0].size
        return {"kind": "resize", "size": h, "height": h, "width": w, "flip": flip}
    if shapes == ["RandomCrop"]:
        (h, w), op = geometry[0].size, geometry[0]
        return {"kind": "crop", "size": h, "height": h, "width": w, "padding": op.padding, "fill": op.fill,
                "padding_mode": op.padding_mode, "pad_if_needed": op.pad_if_needed, "flip": flip}
    if shapes == ["Resize"]:
        raise _refused("Resize(%d) alone" % geometry[0].short, "add CenterCrop(n), or use Resize((h, w)): it "
                       "gives images of different sizes, and a batch needs one")
    if not shapes:  # only ToTensor and the like: no geometry, the records as stored
        if flip:
            raise _refused("RandomHorizontalFlip without a geometry", "add one (RandomResizedCrop, Resize + "
                           "CenterCrop, Resize((h, w)) or, on raw records too, RandomCrop(size)), or flip the "
                           "batch tensor after the loader: torch.flip(images, dims=[3]) where a random draw "
                           "says so")
        return {"kind": "none", "size": int(size), "geometry": False}
    raise _refused(" + ".join(shapes), "the loader runs one geometry: RandomResizedCrop | Resize + CenterCrop "
                   "| Resize((h, w)) | RandomCrop, each optionally with RandomHorizontalFlip; " + _AFTER +
                   " for the rest")
