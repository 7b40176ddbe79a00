"""shardkit.Dataset: a shard dataset as a map-style view, record by record."""
import hashlib
import json
import os

from ._convert import _int, _path
from ._shardkit import _Dataset


class Dataset:
    """A shard dataset as a map-style view: ``ds[i] -> (payload, label)``, with
    ``bytes`` for JPEG records and a uint8 NumPy array (H, W, C) for raw ones.
    Each read checks the record's checksum, and costs a record: records of
    compressed blocks are sliced from blocks kept decompressed, at most
    ``block_cache_bytes`` of them (256 MiB by default) per process (a
    DataLoader's worker starts its own), so reading a block's records, in
    any order, decompresses it once while it stays cached; a JPEG is one read
    of its bytes."""

    def __init__(self, path, *, block_cache_bytes=256 << 20):
        self.path = os.fspath(path)
        self.block_cache_bytes = _int("block_cache_bytes", block_cache_bytes)
        self._core = _Dataset(_path(path), self.block_cache_bytes)
        self.manifest = json.loads(self._core.manifest_json)

    # Pickled by path, reopened on the other side: a DataLoader's spawn or
    # forkserver workers (forkserver is Python 3.14's default) get their own.
    # The manifest's digest goes along: a dataset replaced at that path since
    # (packed again) is refused, not read by the workers while their parent
    # reads the old one.
    def __getstate__(self):
        return {"path": self.path, "block_cache_bytes": self.block_cache_bytes,
                "manifest_sha256": self._manifest_digest()}

    def __setstate__(self, state):
        self.__init__(state["path"], block_cache_bytes=state.get("block_cache_bytes", 256 << 20))
        expected = state.get("manifest_sha256")
        if expected is not None and expected != self._manifest_digest():
            raise ValueError("%s: the dataset there is not the one this Dataset was pickled from (its "
                             "manifest differs: replaced or packed again since)" % self.path)

    def _manifest_digest(self):
        text = self._core.manifest_json
        if not isinstance(text, bytes):
            text = text.encode("utf-8", "surrogatepass")
        return hashlib.sha256(text).hexdigest()

    def __len__(self):
        return len(self._core)

    def __getitem__(self, index):
        return self._core.item(index)  # out of range: IndexError, from the core

    def key(self, index):
        """The record's key (its source file or index, as packed); bytes that
        are not UTF-8 come back as surrogate escapes, as os.fsdecode does."""
        return self._core.get(index)[2].decode("utf-8", "surrogateescape")

    @property
    def classes(self):
        return list(self._core.classes)

    @property
    def kind(self):
        """'jpeg', 'raw_u8' or 'bytes'."""
        return self._core.kind

    @property
    def shape(self):
        """(H, W, C) of raw records, else None."""
        shape = self._core.shape
        return tuple(shape) if shape else None
