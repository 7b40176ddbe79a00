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

Transforms need JPEG records: on raw records (IDX, HDF5, bigMNIST) the only
transform is None, the records as stored.
"""
import logging

__all__ = ["Compose", "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "plan"]


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
        raise ValueError("%s(interpolation=%s): shardkit resamples bilinearly (antialiased, as torchvision "
                         "does for PIL images); use the default interpolation" % (owner, name))


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
            raise ValueError("Resize(max_size=...) is not supported by shardkit's loader")
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


def _translate(t):
    """A torchvision (v1 or v2) transform as ours, or a ValueError that says
    where it belongs."""
    if isinstance(t, (Compose, RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip)):
        return t
    name = type(t).__name__
    module = type(t).__module__ or ""
    if not module.startswith("torchvision"):
        raise ValueError("transform: %r is neither a shardkit.transforms nor a torchvision transform" % (t,))
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
    if name in _NO_OPS:
        return _to_float(t, name) if name in ("ToTensor", "ConvertImageDtype", "ToDtype") else None
    if name == "Normalize":
        raise ValueError("transform: Normalize runs after the loader, on the batch: take it out of the "
                         "transform and add, in the training loop, images = shardkit.normalize(images, "
                         "mean=%s, std=%s) (on the uint8 batch, on the GPU after "
                         "images.cuda(non_blocking=True) where there is one: uint8 is 4x fewer bytes to "
                         "copy); leaving it out trains on unnormalised inputs" % (_values(t.mean),
                                                                                   _values(t.std)))
    if name in _ON_GPU:
        raise ValueError("transform: %s does not run in shardkit's loader; apply it after the loader to "
                         "the uint8 images tensor [B, C, H, W], on its device: torchvision's %s takes "
                         "tensors (one random draw per call; for a draw per sample: "
                         "torch.stack([t(img) for img in images]))" % (name, name))
    raise ValueError("transform: torchvision's %s is not supported by shardkit's loader (it runs "
                     "RandomResizedCrop, Resize, CenterCrop and RandomHorizontalFlip)" % name)


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
        raise ValueError("transform: more than one RandomHorizontalFlip")
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
    if shapes == ["Resize"]:
        raise ValueError("transform: Resize(%d) alone gives images of different sizes; batches need one: "
                         "add CenterCrop(n), or use Resize((h, w))" % geometry[0].short)
    if not shapes:  # only ToTensor and the like: no geometry, the records as stored
        if flip:
            raise ValueError("transform: RandomHorizontalFlip needs a geometry (RandomResizedCrop, Resize "
                             "+ CenterCrop or Resize((h, w))); on raw records flip the batch after the "
                             "loader: torch.flip(images, dims=[3]) where a random draw says so")
        return {"kind": "none", "size": int(size), "geometry": False}
    raise ValueError("transform: shardkit's loader runs one of RandomResizedCrop | Resize + CenterCrop | "
                     "Resize((h, w)), each optionally with RandomHorizontalFlip; not %s" %
                     (" + ".join(shapes) or "no geometry"))
