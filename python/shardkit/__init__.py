"""shardkit from Python: the C++ loader and shard format, for training scripts.

    import shardkit
    loader = shardkit.Loader("/scratch/imagenet-train", batch_size=256, transform="train")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:      # uint8 [B, 3, 224, 224], int64 [B]
            ...

Every byte is read, checked, decoded and augmented by the C++ core (the same
code as shardkit-bench and shardkit-train); this module only adapts it to
PyTorch's conventions. Batches are not copied: `images` views the loader's
batch memory, which the loader does not reuse while any tensor views it.
"""
import json
import os

from ._shardkit import CorruptionError, _Dataset, _Loader, _Writer, __version__

__all__ = ["Loader", "Dataset", "Writer", "CorruptionError", "distributed_defaults"]

_STATE_VERSION = 1


def _env_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError("%s=%r is not an integer" % (name, value)) from None
    return None


def _int(name, value, lo, hi):
    """value as an int in lo..hi, or a ValueError naming the argument."""
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be an integer, not %r" % (name, value)) from None
    if not lo <= v <= hi:
        raise ValueError("%s must be in %d..%d, not %d" % (name, lo, hi, v))
    return v


def _path(path):
    """A filesystem path as bytes (any bytes a POSIX path may hold)."""
    try:
        return os.fsencode(path)
    except TypeError:
        raise ValueError("path must be a str, bytes or os.PathLike, not %r" % (path,)) from None


def distributed_defaults():
    """(rank, world_size): torch.distributed's when it is initialised, else
    torchrun's RANK/WORLD_SIZE, else SLURM's SLURM_PROCID/SLURM_NTASKS, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world is not None:
        return rank, world
    rank, world = _env_int("SLURM_PROCID"), _env_int("SLURM_NTASKS")
    if rank is not None and world is not None:
        return rank, world
    return 0, 1


def _default_workers():
    """This process's share of the CPUs it may run on: the cores of its
    affinity mask divided among the ranks of this node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    local = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE") or 1
    return max(1, cpus // max(1, local))


class Loader:
    """Batches of one rank's share of a shard dataset, decoded and augmented by
    C++ worker threads ahead of the training loop.

    Iterating yields ``(images, labels)``: ``images`` a ``torch.uint8`` tensor of
    shape ``[B, C, H, W]`` (for ``layout="NHWC"`` a channels-last view of the
    same shape), ``labels`` a ``torch.int64`` tensor ``[B]``. Normalise on the
    device: ``images.cuda(non_blocking=True).float().sub_(mean).div_(std)``.

    Every rank gets ``len(loader)`` batches per epoch (DistributedSampler's
    rule: padding with drop_last=False, dropping with drop_last=True). The
    batches depend only on (dataset, seed, epoch, rank, world_size,
    batch_size, transform), never on ``workers``.
    """

    def __init__(self, path, batch_size, *, workers=None, transform="train", size=224, rank=None,
                 world_size=None, seed=0, shuffle="auto", drop_last=False, layout="NCHW",
                 prefetch=4, on_corrupt="fail", skip_budget=100):
        import torch  # noqa: F401  (tensors are what this class yields)

        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if rank is None:
            rank, world_size = distributed_defaults()
        if workers is None:
            workers = _default_workers()
        self.path = os.fspath(path)
        self.batch_size = _int("batch_size", batch_size, 1, 1 << 20)
        self.seed = _int("seed", seed, 0, (1 << 64) - 1)
        self.world_size = _int("world_size", world_size, 1, 1 << 30)
        self.rank = _int("rank", rank, 0, self.world_size - 1)
        self.transform = "none" if transform is None else str(transform)
        self._core = _Loader(_path(path), self.batch_size, _int("workers", workers, 1, 256), self.transform,
                             _int("size", size, 1, 4096), self.rank, self.world_size, self.seed, str(shuffle),
                             bool(drop_last), str(layout), _int("prefetch", prefetch, 1, 1024), str(on_corrupt),
                             _int("skip_budget", skip_budget, 0, (1 << 63) - 1))
        self._epoch = 0
        self._resume = None  # (epoch, batch) from load_state_dict, not yet used
        self._position = (0, 0)  # (epoch, batches yielded): what state_dict saves

    def __len__(self):
        return self._core.batches_per_epoch

    @property
    def samples_per_epoch(self):
        """This rank's samples per epoch, padding included."""
        return self._core.samples_per_epoch

    @property
    def shuffle_mode(self):
        """The shuffle in effect: 'full', 'block' or 'none' ('auto' resolved)."""
        return self._core.shuffle_mode

    @property
    def shape(self):
        """(C, H, W) of every sample."""
        return self._core.shape

    def set_epoch(self, epoch):
        """The epoch the next iteration reads (its shuffle and augmentation).
        After load_state_dict, setting the saved epoch resumes it mid-way."""
        self._epoch = int(epoch)
        if self._resume is None or self._resume[0] != self._epoch:
            self._position = (self._epoch, 0)

    def __iter__(self):
        for images, labels, _, _ in self.batches():
            yield images, labels

    def batches(self):
        """Like iterating, with more per batch: (images, labels, sample_ids,
        real_size), where sample_ids are the global record numbers and the
        first real_size samples are not padding."""
        import torch

        start = 0
        if self._resume is not None and self._resume[0] == self._epoch:
            start = self._resume[1]
        self._resume = None
        epoch = self._epoch
        self._core.start_epoch(epoch, start)
        self._position = (epoch, start)
        while True:
            batch = self._core.next()
            if batch is None:
                break
            images, labels, ids, real = batch
            self._position = (epoch, self._position[1] + 1)
            yield torch.from_numpy(images), torch.from_numpy(labels), torch.from_numpy(ids), real

    def state_dict(self):
        """Where the loader is: a new loader with the same options given this
        state continues with exactly the batches this one would have yielded
        next (call set_epoch with the saved epoch, or none, before iterating)."""
        epoch, batch = self._resume if self._resume is not None else self._position
        return {
            "version": _STATE_VERSION,
            "epoch": int(epoch),
            "batch": int(batch),
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "records": self._core.dataset_records,
        }

    def load_state_dict(self, state):
        """Continue from `state` (from state_dict) at the next iteration of its epoch."""
        try:
            if state["version"] != _STATE_VERSION:
                raise ValueError("loader state version %r, this shardkit reads %d" %
                                 (state["version"], _STATE_VERSION))
            mine = {"seed": self.seed, "world_size": self.world_size,
                    "batch_size": self.batch_size, "records": self._core.dataset_records}
            for key, value in mine.items():
                if state[key] != value:
                    raise ValueError("loader state has %s=%r, this loader %r: the batches would "
                                     "differ" % (key, state[key], value))
            epoch, batch = int(state["epoch"]), int(state["batch"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError("not a shardkit loader state: %s" % e) from None
        if not 0 <= batch <= len(self):
            raise ValueError("loader state batch %d is outside 0..%d" % (batch, len(self)))
        self._epoch = epoch
        self._resume = (epoch, batch)
        self._position = (epoch, batch)

    def stats(self):
        """Seconds per stage summed over workers (read, decompress, decode,
        transform), the consumer's wait, counts and corrupt samples skipped."""
        return self._core.stats()

    def reset_stats(self):
        self._core.reset_stats()


class Dataset:
    """A shard dataset as a map-style view: ``ds[i] -> (payload, label)``, with
    ``bytes`` for JPEG records and a uint8 NumPy array (H, W, C) for raw ones.
    Each read checks the record's checksum."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._core = _Dataset(_path(path))
        self.manifest = json.loads(self._core.manifest_json)

    def __len__(self):
        return len(self._core)

    def __getitem__(self, index):
        payload, label, _ = self._core.get(self._index(index))
        return payload, label

    def key(self, index):
        """The record's key (its source file or index, as packed); bytes that
        are not UTF-8 come back as surrogate escapes, as os.fsdecode does."""
        return self._core.get(self._index(index))[2].decode("utf-8", "surrogateescape")

    def _index(self, index):
        i = int(index)
        if not -len(self) <= i < len(self):
            raise IndexError("record index %d out of range (%d records)" % (i, len(self)))
        return i

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


class Writer:
    """Packs records into a shard dataset with the format and checksums of
    shardkit-pack. ``close()`` (or leaving the ``with`` block) publishes the
    manifest atomically; if it is not reached (an exception), the unfinished
    shard is deleted and the directory does not look like a dataset.

        with shardkit.Writer(out, kind="jpeg", classes=names) as w:
            for path, label in samples:
                w.add(open(path, "rb").read(), label, key=path)
    """

    def __init__(self, path, kind="jpeg", *, shape=None, classes=(), shard_size=256 << 20,
                 compression="auto", overwrite=False):
        self.path = os.fspath(path)
        created_by = json.dumps({"tool": "shardkit (python)", "version": __version__,
                                 "kind": kind})
        shape = [_int("shape", d, 1, 65536) for d in (shape or ())]
        names = [str(c) for c in classes]
        for name in names:
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("class name %r is not valid UTF-8 (manifests are UTF-8 JSON)" % name) from None
        self._core = _Writer(_path(path), str(kind), shape, names,
                             _int("shard_size", shard_size, 1 << 16, 1 << 62), str(compression),
                             bool(overwrite), created_by)

    def add(self, data, label, key=None):
        """Appends one record: bytes-like data (a JPEG for kind='jpeg', H*W*C
        bytes or a uint8 array for kind='raw'), an integer label."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            import numpy as np

            data = np.ascontiguousarray(data)
            if data.dtype != np.uint8:
                raise ValueError("record data must be bytes or a uint8 array, not %s" % data.dtype)
        if key is not None and not isinstance(key, bytes):
            key = str(key).encode("utf-8", "surrogateescape")  # keys are bytes, like file names
        self._core.add(data, _int("label", label, -1, (1 << 31) - 1), key)

    @property
    def records(self):
        return self._core.records

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
