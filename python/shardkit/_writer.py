"""shardkit.Writer: records packed into a shard dataset with shardkit-pack's
format, rules and checksums (the core's DatasetWriter)."""
import json
import os

from ._convert import _int, _path, _utf8
from ._shardkit import _DEFAULT_SHARD_SIZE, _Writer, __version__


class Writer:
    """Packs records into a shard dataset with the format and checksums of
    shardkit-pack. ``kind``: 'jpeg', 'raw_u8' (``shape=(H, W, C)``; 'raw' is
    the same) or 'bytes', as the manifest names them. The rules are
    shardkit-pack's, from the library: with ``compression='auto'`` JPEGs are
    stored and raw records zstd-compressed in shards of a fixed record count
    (``shard_size`` bytes' worth); 'zstd' or 'none' overrides the
    compression; re-encoded images get shardkit-pack's default quality.
    ``close()`` (or leaving
    the ``with`` block) publishes the manifest atomically; if it is not
    reached (an exception), every shard it wrote is deleted (and the
    directory, if it made it), and a dataset it was replacing (overwrite) is
    left whole. ``close()`` with no record added raises ValueError and
    writes nothing, as shardkit-pack refuses to pack nothing.

    ``classes``: the class names, label i naming classes[i]. Without them,
    labels are class numbers, as shardkit-pack takes them without
    --class-names: the manifest names the classes "0", "1", ... up to the
    largest label added (a class above it that has no record is then
    missing: give the names), and a dataset whose labels are all -1 has no
    classes (unlabelled).

        with shardkit.Writer(out, kind="jpeg", classes=names) as w:
            for path, label in samples:
                w.add(open(path, "rb").read(), label, key=path)
    """

    def __init__(self, path, kind="jpeg", *, shape=None, classes=(),
                 shard_size=_DEFAULT_SHARD_SIZE, compression="auto", overwrite=False):
        self.path = os.fspath(path)
        created_by = json.dumps({"tool": "shardkit (python)", "version": __version__,
                                 "kind": kind})
        shape = [_int("shape", d) for d in (shape or ())]
        # As bytes: a surrogate escape (os.fsdecode's, from a folder name) as
        # the byte it stands for, which the core refuses naming the class.
        names = [_utf8(str(c)) for c in classes]
        self._core = _Writer(_path(path), str(kind), shape, names,
                             _int("shard_size", shard_size), str(compression),
                             bool(overwrite), created_by)

    def add(self, data, label, key=None):
        """Appends one record: bytes-like data (for kind='jpeg' a JPEG or PNG,
        recognised by content, validated and converted as shardkit-pack does;
        for kind='raw_u8' H*W*C bytes in H, W, C order, or a uint8 array of
        the declared shape (H, W, C), or (H, W) when C is 1: an array of
        another shape, a CHW one say, is a ValueError naming both shapes, as
        its bytes would be stored scrambled), an integer label. An error
        names the record by ``key``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            import numpy as np

            data = np.ascontiguousarray(data)
            if data.dtype != np.uint8:
                raise ValueError("record data must be bytes or a uint8 array, not %s" % data.dtype)
        try:
            label = _int("label", label)
        except ValueError as e:
            raise ValueError("record %r: %s" % (key, e)) from None
        if key is not None and not isinstance(key, bytes):
            key = str(key).encode("utf-8", "surrogateescape")  # keys are bytes, like file names
        self._core.add(data, label, key)

    @property
    def records(self):
        return self._core.records

    @property
    def converted(self):
        """Records given as PNG or CMYK JPEG and stored as RGB JPEG (as shardkit-pack does)."""
        return self._core.converted

    def close(self):
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._core.abort()
        return False
