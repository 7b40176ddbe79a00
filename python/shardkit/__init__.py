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
__all__ = ["CorruptionError", "Dataset", "Loader", "Writer", "distributed_defaults", "normalize",
           "transforms"]

import hashlib
import json
import logging
import math
import operator
import os
import threading
import warnings

from . import transforms

from ._shardkit import (
    _DEFAULT_SHARD_SIZE,
    _MAX_PREFETCH,
    CorruptionError,
    ResolutionSchedule,
    _Dataset,
    _Loader,
    _Writer,
    __version__,
)

__all__ = ["Loader", "Dataset", "Writer", "CorruptionError", "ResolutionSchedule", "distributed_defaults",
           "normalize", "transforms"]

def _env_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError("%s=%r is not an integer" % (name, value)) from None
    return None


def _int(name, value):
    """value as an int64 for this module's own use (the loader's options go
    to the core as given: its keyword table converts them, and the C++ core
    checks their ranges, once), or a ValueError naming the argument."""
    # Integers as operator.index takes them (NumPy and torch integers too), or
    # a float that is one exactly (3.0: MATLAB and HDF5 labels are doubles);
    # 2.99, "4" or NaN is refused, never truncated.
    try:
        v = operator.index(value)
    except TypeError:
        try:
            f = None if isinstance(value, (str, bytes)) else float(value)
        except (TypeError, ValueError):
            f = None
        if f is None or not math.isfinite(f) or not f.is_integer():
            raise ValueError("%s must be an integer, not %r" % (name, value)) from None
        v = int(f)
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError("%s=%d is out of range" % (name, v))
    return v


def _utf8(text):
    """text as UTF-8 bytes, surrogates kept (as the bytes they escape, or as
    themselves), never an error: whether it is valid is the core's to say."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _path(path, name="path"):
    """A filesystem path as bytes (any bytes a POSIX path may hold)."""
    try:
        encoded = os.fsencode(path)
    except TypeError:
        raise ValueError("%s must be a str, bytes or os.PathLike, not %r" % (name, path)) from None
    if b"\0" in encoded:  # the core would read the path only up to it
        raise ValueError("%s %r holds a null byte" % (name, path))
    return encoded


def _distributed_defaults():
    """(rank, world_size, where they came from, or None for the fallback)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    except ImportError:
        pass
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world is not None:
        return rank, world, "RANK/WORLD_SIZE"
    rank, world = _env_int("SLURM_PROCID"), _env_int("SLURM_NTASKS")
    if rank is not None and world is not None:
        return rank, world, "SLURM_PROCID/SLURM_NTASKS"
    return 0, 1, None


def distributed_defaults():
    """(rank, world_size): torch.distributed's when it is initialised, else
    torchrun's RANK/WORLD_SIZE, else SLURM's SLURM_PROCID/SLURM_NTASKS, else (0, 1)."""
    return _distributed_defaults()[:2]


def _default_workers():
    """This process's share of the CPUs it may run on: the cores of its
    affinity mask divided among the ranks of this node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    local = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE") or 1
    return max(1, cpus // max(1, local))


_log = logging.getLogger("shardkit")
_said = set()  # one-time messages already given in this process

# DataLoader arguments that have no meaning here, and why.
_NO_EQUIVALENT = {
    "collate_fn": "batches are already collated: uint8 images [B, C, H, W] and int64 labels [B]",
    "worker_init_fn": "the workers are C++ threads that run no Python",
}
# DataLoader arguments accepted for a script's sake, with nothing to do here.
_NO_EFFECT = ("persistent_workers", "multiprocessing_context", "timeout", "pin_memory_device")


def _once(key, log, message):
    if key not in _said:
        _said.add(key)
        log(message)


_normalize_constants = {}  # (device, dtype, mean, std) -> tensors on that device


def normalize(images, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype=None, memory_format=None):
    """A uint8 batch as normalised floats, on the batch's own device, with
    torchvision's constants as written (on the 0-1 scale, as for Normalize
    after ToTensor): (images / 255 - mean) / std. Move the uint8 batch to the
    GPU first (4x fewer bytes than floats), then normalise there:

        images = shardkit.normalize(images.cuda(non_blocking=True))
    """
    import torch

    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise TypeError("normalize: images must be a batch, a tensor [B, C, H, W], not %s" % (
            "a %d-d tensor" % images.dim() if isinstance(images, torch.Tensor) else type(images).__name__))
    dtype = dtype or torch.float32
    c = images.shape[1]
    # A number for every channel, as torchvision's Normalize(0.1307, 0.3081) takes it.
    mean = (mean,) if isinstance(mean, (int, float)) else mean
    std = (std,) if isinstance(std, (int, float)) else std
    # The constants go to the device once, not with every batch (a small
    # host-to-device copy per step would wait for the host).
    key = (images.device, dtype, tuple(float(v) for v in mean), tuple(float(v) for v in std))
    if any(not math.isfinite(v) for v in key[2] + key[3]) or 0.0 in key[3]:
        raise ValueError("normalize: mean and std must be finite and std non-zero, not mean=%r std=%r" % (
            key[2], key[3]))
    if key not in _normalize_constants:
        _normalize_constants[key] = (
            torch.as_tensor(key[2], dtype=dtype, device=images.device).reshape(1, -1, 1, 1),
            torch.as_tensor(key[3], dtype=dtype, device=images.device).reshape(1, -1, 1, 1))
    mean, std = _normalize_constants[key]
    if mean.shape[1] not in (1, c) or std.shape[1] not in (1, c):
        raise ValueError("normalize: %d channels, but mean has %d values and std %d" % (c, mean.shape[1],
                                                                                       std.shape[1]))
    if memory_format is None:
        channels_last = images.dim() == 4 and images.is_contiguous(memory_format=torch.channels_last) \
            and not images.is_contiguous()
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x = images.to(dtype=dtype, memory_format=memory_format)
    return x.mul_(1.0 / 255).sub_(mean).div_(std)


def _import_torch(who):
    """torch, or an ImportError that names this interpreter and what to do."""
    try:
        import torch
    except ImportError as e:
        import sys

        raise ImportError("%s yields torch tensors, and this interpreter (%s, Python %s) cannot import "
                          "torch (%s): install PyTorch for it (Debian: apt-get install python3-torch, for "
                          "/usr/bin/python3), or run the script with the interpreter that has torch. "
                          "shardkit.Dataset and shardkit.Writer work without torch."
                          % (who, sys.executable, ".".join(map(str, sys.version_info[:3])), e)) from e
    return torch


class _Sampler:
    """loader.sampler: the part of DistributedSampler's interface scripts use."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)

    @property
    def epoch(self):
        return self._loader.epoch

    def __len__(self):
        """How many ids iterating yields: this rank's samples per epoch, or
        after load_state_dict, what is left of the saved epoch."""
        return self._loader._core.pass_samples

    def __iter__(self):
        """The record numbers the loader's next iteration reads, in order,
        padding included (as a DistributedSampler yields its indices): the
        ids ``loader.batches()`` gives with each batch, here without reading
        anything. After load_state_dict, the rest of the saved epoch."""
        return iter(self._loader._core.pass_records().tolist())


def _indices(it, who):
    """The indices an iterator yields (ints, NumPy or torch integers), as an int64 array."""
    import numpy as np

    values = list(it)
    if not values:
        return np.zeros(0, dtype=np.int64)
    array = np.asarray(values)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        bad = next((v for v in values if not isinstance(v, int) and getattr(v, "dtype", None) is None), values[0])
        raise ValueError("%s yielded %r: a sampler yields record indices (integers)" % (who, bad))
    return array.astype(np.int64, copy=False)


def _generator_of(obj):
    """The torch.Generator a sampler draws from, if it keeps one (generator=)."""
    import torch

    g = getattr(obj, "generator", None)
    return g if isinstance(g, torch.Generator) else None


class _UserOrder:
    """A user's sampler or batch_sampler as the source of each epoch's order:
    what DataLoader does with them, once per iteration, and their state."""

    def __init__(self, sampler, batch_sampler, generator, batch_size):
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.batch_size = batch_size
        source = batch_sampler if batch_sampler is not None else sampler
        # Where set_epoch goes, and whose state a checkpoint keeps: the
        # sampler, or the batch sampler (or the sampler inside it).
        self.inner = getattr(batch_sampler, "sampler", None) if batch_sampler is not None else None
        self.epoch_target = next((o for o in (source, self.inner) if callable(getattr(o, "set_epoch", None))),
                                 None)
        self.source = source
        # The sampler that partitions (a DistributedSampler: num_replicas and rank), if one does.
        self.partitioner = next((o for o in (source, self.inner) if isinstance(getattr(o, "num_replicas", None), int)
                                 and isinstance(getattr(o, "rank", None), int)), None)

    def set_epoch(self, epoch):
        if self.epoch_target is not None:
            self.epoch_target.set_epoch(epoch)

    def draw(self):
        """The next iteration's indices, drawn as DataLoader's iterator draws
        them: iter(sampler), then one number from the loader's generator
        (torch's global RNG by default) for its workers' base seed, then the
        sampler's indices. A sampler drawing from the same RNG so yields what
        it yields under DataLoader."""
        import torch

        it = iter(self.source)
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        return self._read(it)

    def _read(self, it):
        """The indices of an iteration of the source, batches checked and joined."""
        if self.batch_sampler is None:
            return _indices(it, "sampler")
        batches = [_indices(b, "batch_sampler") for b in it]
        for k, b in enumerate(batches):
            if len(b) > self.batch_size or (len(b) != self.batch_size and k + 1 < len(batches)) or not len(b):
                raise ValueError("batch_sampler: batch %d of this epoch holds %d indices; shardkit.Loader's "
                                 "batches hold batch_size=%d samples each but the last, which may hold fewer "
                                 "(torch's BatchSampler makes such batches; batch_size is the batch sampler's "
                                 "batch_size, or, for one without that attribute, batch_size=)"
                                 % (k, len(b), self.batch_size))
        import numpy as np

        return np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)

    def __len__(self):
        return len(self.source)

    def state(self):
        """What the next epochs' draws depend on, as JSON-able values: the
        sampler's own state_dict() where it has one, else its generator's
        state; and the loader's generator's."""
        import base64

        out = {}
        for name, obj in (("sampler", self.source), ("inner", self.inner)):
            if obj is None:
                continue
            if callable(getattr(obj, "state_dict", None)):
                out[name] = {"state_dict": obj.state_dict()}
            elif _generator_of(obj) is not None:
                out[name] = {"generator": base64.b64encode(_generator_of(obj).get_state().numpy().tobytes())
                             .decode("ascii")}
        if self.generator is not None:
            out["generator"] = base64.b64encode(self.generator.get_state().numpy().tobytes()).decode("ascii")
        p = self.partitioner
        if p is not None:  # whose order a saved epoch is
            out["partition"] = [p.rank, p.num_replicas, getattr(p, "epoch", 0)]
        return out

    def order_for_this_rank(self, state, saved):
        """`state` (a loader state) with its epoch's order this rank's: as
        saved, or, saved by another rank of a torch DistributedSampler (a
        checkpoint written by rank 0 only), that sampler's order for this rank
        drawn again (it depends on its seed and epoch only). Another rank's
        order from any other sampler is refused: it cannot be drawn again."""
        p, where = self.partitioner, saved.get("partition")
        if p is None or where is None or [p.rank, p.num_replicas] == list(where[:2]) or not state.get("order"):
            return state
        from torch.utils.data import DistributedSampler

        if not isinstance(p, DistributedSampler) or p.num_replicas != where[1]:
            raise ValueError("this loader state is mid-way through an epoch of rank %d of %d's sampler, whose "
                             "indices it holds; this loader's sampler is rank %d of %d: load each rank's own "
                             "state_dict (a sampler's order is its rank's)" % (where[0], where[1], p.rank,
                                                                              p.num_replicas))
        p.set_epoch(where[2])
        return dict(state, order=self._read(iter(self.source)).tolist())

    def load_state(self, state):
        import base64

        import torch

        def generator_state(text):
            return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

        for name, obj in (("sampler", self.source), ("inner", self.inner)):
            saved = state.get(name)
            if obj is None or not saved:
                continue
            if "state_dict" in saved and callable(getattr(obj, "load_state_dict", None)):
                obj.load_state_dict(saved["state_dict"])
            elif "generator" in saved and _generator_of(obj) is not None:
                _generator_of(obj).set_state(generator_state(saved["generator"]))
        if self.generator is not None and state.get("generator"):
            self.generator.set_state(generator_state(state["generator"]))


class _DeviceCopies:
    """Batches to a GPU as shardkit-train's feeder moves them: each copied
    from its pinned ring slot (the lease, held by the numpy array) on a side
    stream, the consumer's current stream made to wait for the copy, and the
    lease kept until the copy is done (an event), so the ring never reuses
    memory a copy still reads."""

    @staticmethod
    def open(torch, device, pin_memory):
        if device is None:
            return None
        device = torch.device(device)
        if device.type == "cpu":
            return None
        if device.type != "cuda":
            raise ValueError("shardkit.Loader(device=%r): batches go to 'cuda' (or 'cuda:N') or stay on the "
                             "host (None, 'cpu')" % str(device))
        if not torch.cuda.is_available():
            raise RuntimeError("shardkit.Loader(device=%r): CUDA is not available here (this PyTorch has no "
                               "CUDA, or no GPU is visible: torch.cuda.is_available() is False); leave "
                               "device out for batches in host memory" % str(device))
        index = device.index if device.index is not None else torch.cuda.current_device()
        if not 0 <= index < torch.cuda.device_count():
            raise ValueError("shardkit.Loader(device=%r): there are %d visible GPU(s)"
                             % (str(device), torch.cuda.device_count()))
        if pin_memory:
            raise ValueError("shardkit.Loader: device= copies batches to the GPU from pinned memory "
                             "itself; leave pin_memory out")
        return _DeviceCopies(torch, torch.device("cuda", index))

    def __init__(self, torch, device):
        import collections

        self.torch, self.device, self.index = torch, device, device.index
        self.stream = torch.cuda.Stream(device)
        self.pending = collections.deque()  # (event, lease arrays) of copies that may still run

    def copy(self, images, labels):
        torch = self.torch
        self._release_done()
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            x = torch.from_numpy(images).to(self.device, non_blocking=True)
            y = torch.from_numpy(labels).to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)
        # Made on the side stream, used on the consumer's: the caching
        # allocator may reuse their memory only after the consumer is done.
        x.record_stream(consumer)
        y.record_stream(consumer)
        self.pending.append((done, images, labels))
        return x, y

    def _release_done(self):
        while self.pending and self.pending[0][0].query():
            self.pending.popleft()

    def finish(self):
        """Every copy done and its lease back to the ring (an iteration's end)."""
        while self.pending:
            self.pending.popleft()[0].synchronize()


class Loader:
    """Batches of one rank's share of a shard dataset, decoded and augmented by
    C++ worker threads ahead of the training loop.

    Iterating yields ``(images, labels)``: ``images`` a ``torch.uint8`` tensor of
    shape ``[B, C, H, W]`` (for ``layout="NHWC"`` a channels-last view of the
    same shape), ``labels`` a ``torch.int64`` tensor ``[B]``. Normalise on the
    device: ``shardkit.normalize(images.cuda(non_blocking=True))``.

    Every rank gets ``len(loader)`` batches per epoch (DistributedSampler's
    rule: padding with drop_last=False, dropping with drop_last=True). The
    batches depend only on (dataset, seed, epoch, rank, world_size,
    batch_size, transform), never on ``workers``.

    Epochs: ``set_epoch(e)`` chooses the epoch the next iteration reads (its
    order, crops and flips); iterating again without it reads the next one.

    Arguments (defaults):
      transform="train"  'train' (RandomResizedCrop(size) + flip), 'val'
                         (Resize(size/0.875) + CenterCrop(size)), 'resize'
                         (Resize((size, size))), None (raw records as they
                         are; JPEGs squashed to size), or torchvision-style
                         transforms: see shardkit.transforms
      size=224           output side of the named transforms; or a
                         shardkit.ResolutionSchedule: each epoch is read at
                         the side it gives that epoch (FFCV's low-resolution
                         first epochs; set_size() sets one by hand)
      workers=None       decode threads; None: this process's share of its
                         CPUs (affinity mask / local ranks). num_workers= is
                         the same (0 counts as 1: there is no "main process"
                         loading here)
      shuffle="auto"     True/False as DataLoader; or 'full', 'block', 'none',
                         'auto' (full, or block-local for datasets larger than
                         memory or the block cache)
      drop_last=False    as DataLoader
      device=None        'cuda' (or 'cuda:N', a torch.device): batches arrive
                         on that GPU, uint8 images and int64 labels (ids on
                         the host). The loader's ring is in pinned memory and
                         each batch is copied from it on a side stream, which
                         the current stream waits for; a ring slot is reused
                         once its copy is done. No host copy (pin_memory=True
                         makes one). A machine without CUDA: RuntimeError
      pin_memory=False   batches in page-locked memory (where CUDA is), for
                         .cuda(non_blocking=True)
      rank, world_size   None: torch.distributed's, else RANK/WORLD_SIZE,
                         else SLURM's, else 0 of 1 (said once, as a warning)
      seed=0, layout="NCHW", prefetch=4 (batches decoded ahead)
      read_depth=None    reads kept in flight ahead of the decoders (network
                         storage: its latency is hidden by depth, not by
                         workers): None is 32, or 128 for s3:// and http(s)://
                         paths; read_ahead_bytes=64 MiB bounds their memory
      cache_dir=None     s3:// and http(s):// paths: keep what is read in this
                         node-local directory (shared by the node's ranks and
                         by later jobs), so later epochs read it from there;
                         cache_limit=0 (bytes, or a size such as "200G"; 0:
                         no limit) bounds it. A local path is refused (the
                         page cache is its cache), as is cache_limit without
                         cache_dir; stats() counts cache_hits, cache_misses
      on_corrupt="fail"  or "skip": a corrupt record is replaced by another of
                         the rank's records, counted, and logged (each damage
                         once, the first few), until more than skip_budget=100
                         damages were found: a corrupt record is one, a
                         corrupt compressed block is one whatever it held
      sampler=None       DataLoader's: each iteration reads the indices the
                         sampler yields (global record numbers), in its order,
                         in batches of batch_size (drop_last as DataLoader);
                         set_epoch(e) is forwarded to it. The sampler decides
                         this rank's records: the loader partitions nothing,
                         takes no rank/world from the environment, and refuses
                         world_size > 1 (give a DistributedSampler its
                         num_replicas and rank) and shuffle=True
      batch_sampler=None DataLoader's: each batch is the list it yields (all
                         of one size, batch_size or the batch sampler's
                         batch_size, but the last); not with batch_size,
                         sampler, shuffle or drop_last
      generator=None     with a sampler: the RNG DataLoader's iterator takes
                         one number from per iteration (torch's global RNG
                         by default), taken here too, so a sampler drawing
                         from the same RNG yields what it yields under
                         DataLoader
    One thread iterates a loader at a time (a second gets a RuntimeError);
    Ctrl-C while waiting for a batch raises KeyboardInterrupt at once.
    ``collate_fn`` and ``worker_init_fn`` have no equivalent and are refused
    with the reason.
    """

    def __init__(self, path, batch_size=1, *, workers=None, transform="train", size=224, rank=None,
                 world_size=None, seed=0, shuffle="auto", drop_last=False, layout="NCHW",
                 prefetch=4, on_corrupt="fail", skip_budget=100, pin_memory=False, num_workers=None,
                 prefetch_factor=None, read_depth=None, read_ahead_bytes=64 << 20, cache_dir=None,
                 cache_limit=0, distributed=None, sampler=None, batch_sampler=None, generator=None,
                 device=None, **dataloader_args):
        torch = _import_torch("shardkit.Loader")

        for name in dataloader_args:
            if name in _NO_EQUIVALENT:
                raise TypeError("shardkit.Loader has no %s: %s" % (name, _NO_EQUIVALENT[name]))
            if name not in _NO_EFFECT:
                raise TypeError("shardkit.Loader got an unexpected keyword argument %r" % name)
        if workers is not None and num_workers is not None:
            raise ValueError("give workers or num_workers, not both")
        if num_workers is not None:
            num_workers = _int("num_workers", num_workers)
            if num_workers < 0:  # as DataLoader says
                raise ValueError("num_workers must be non-negative, not %d" % num_workers)
            workers = max(1, num_workers)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if distributed is not None and not isinstance(distributed, bool):
            raise ValueError("distributed must be True, False or None, not %r" % (distributed,))
        self._order = self._user_order(sampler, batch_sampler, generator, batch_size, shuffle, drop_last,
                                       distributed)
        if self._order is not None:
            batch_size, shuffle = self._order.batch_size, None
            if rank is None:  # the sampler's partition, never the environment's
                rank, world_size = 0, 1
        elif distributed is False:
            if rank is not None and _int("world_size", world_size) != 1:
                raise ValueError("distributed=False reads the whole dataset on every rank: give it, or "
                                 "rank= and world_size=, not both")
            rank, world_size = 0, 1  # every rank the whole set, as a DataLoader without a sampler
        elif rank is None:
            rank, world_size, source = _distributed_defaults()
            if source is None:
                _once("world", lambda m: warnings.warn(m, stacklevel=4),
                      "shardkit.Loader: no torch.distributed process group and no RANK/WORLD_SIZE or "
                      "SLURM variables: reading the whole dataset as rank 0 of 1 (pass rank= and "
                      "world_size= to say so)")
            else:
                _once(("world", rank, world_size), _log.info,
                      "shardkit.Loader: rank %d of %d (from %s): this rank reads 1/%d of the dataset, as "
                      "with a DistributedSampler; distributed=False gives every rank the whole dataset "
                      "(a DataLoader without a sampler: the usual validation loader)"
                      % (rank, world_size, source, world_size))
        if workers is None:
            workers = _default_workers()
        if isinstance(shuffle, bool):
            shuffle = "auto" if shuffle else "none"
        if prefetch_factor is not None:  # DataLoader's is per worker process
            prefetch_factor = _int("prefetch_factor", prefetch_factor)
            if prefetch_factor < 1:
                raise ValueError("prefetch_factor must be at least 1, not %d" % prefetch_factor)
            prefetch = min(prefetch_factor * max(1, _int("workers", workers)), _MAX_PREFETCH)
        self.path = os.fspath(path)
        self._schedule = size if isinstance(size, ResolutionSchedule) else None
        if self._schedule is not None:
            size = self._schedule(0)  # each pass sets its epoch's (batches())
        plan = transforms.plan(transform, _int("size", size))
        # ToTensor() and the like: float batches, made here after the core's uint8 ones.
        self._to_float = plan.pop("to_float", None)
        if self._to_float is not None:
            _once("to_float", _log.info,
                  "shardkit.Loader: the transform converts to %s%s, as torchvision's does: batches are "
                  "converted on the host; for speed leave ToTensor out and convert (or "
                  "shardkit.normalize) the uint8 batch on the GPU"
                  % (self._to_float[0], " in 0-1" if self._to_float[1] else ""))
        # The core's keyword table converts each option; Loader::Open checks them.
        order = {"shuffle": shuffle} if self._order is None else {"given_order": True}
        self._device = _DeviceCopies.open(torch, device, pin_memory)
        if self._device is not None:
            order["pinned_device"] = self._device.index
        self._core = _Loader(_path(path), batch_size=batch_size, workers=workers, transform=plan, rank=rank,
                             world_size=world_size, seed=seed, drop_last=drop_last,
                             layout=layout, prefetch=prefetch, on_corrupt=on_corrupt, skip_budget=skip_budget,
                             read_depth=-1 if read_depth is None else read_depth,
                             read_ahead_bytes=read_ahead_bytes,
                             cache_dir=b"" if cache_dir is None else _path(cache_dir, "cache_dir"),
                             cache_limit=cache_limit, **order)
        core = self._core
        self.batch_size, self.seed, self.rank, self.world_size = (core.batch_size, core.seed, core.rank,
                                                                  core.world_size)
        self.drop_last = bool(drop_last)
        if self._order is not None and self._order.partitioner is not None:  # the sampler's partition
            self.rank, self.world_size = self._order.partitioner.rank, self._order.partitioner.num_replicas
        elif self._order is not None:
            env_rank, env_world, source = _distributed_defaults()
            if env_world > 1:
                _once(("sampler", env_rank, env_world), _log.info,
                      "shardkit.Loader: rank %d of %d (from %s) reads all the indices its sampler yields, as "
                      "DataLoader does: the sampler does not partition them (a DistributedSampler would)"
                      % (env_rank, env_world, source))
        if core.shuffle_reason:  # shuffle="auto" (or True): which shuffle, and why, said once
            block = core.shuffle_mode == "block"
            _once(("shuffle", self.path, core.shuffle_mode), (lambda m: warnings.warn(m, stacklevel=4))
                  if block else _log.info,
                  "shardkit.Loader: shuffle='auto' chose %s for %s: %s%s" % (
                      "block-local shuffling (blocks in random order, records shuffled within windows "
                      "of blocks: not a uniform permutation)" if block else "a full shuffle (a uniform "
                      "permutation each epoch)", self.path, core.shuffle_reason,
                      "; shuffle='full' asks for a full shuffle anyway (each sample then decompresses "
                      "its block)" if block else ""))
        self.transform = plan["kind"]
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if pin_memory and not self.pin_memory:
            _once("pin", _log.info, "shardkit.Loader: pin_memory=True, but CUDA is not available: not pinned")
        self._dataset = None
        self._skipped_logged = 0
        # Reentrant: a generator collected while the lock is held runs its
        # finally (which takes it) in the same thread.
        self._lock = threading.RLock()
        self._active = None  # (thread, marker) of the iteration in progress

    @staticmethod
    def _user_order(sampler, batch_sampler, generator, batch_size, shuffle, drop_last, distributed):
        """The user's sampler or batch_sampler, checked as DataLoader checks
        them, or None (the loader's own orders)."""
        if sampler is None and batch_sampler is None:
            if generator is not None:
                raise TypeError("shardkit.Loader has no generator without a sampler: the order and augmentation "
                                "come from seed= and the epoch")
            return None
        if distributed:
            raise ValueError("distributed=True with a sampler: the sampler decides this rank's records (a "
                             "DistributedSampler partitions them); leave distributed out")
        if shuffle is True or shuffle in ("full", "block"):
            raise ValueError("sampler option is mutually exclusive with shuffle (as DataLoader says): the "
                             "sampler's order is read")
        if batch_sampler is not None:
            # Its batch size is its own (torch's BatchSampler says it); one
            # without the attribute takes batch_size=, which DataLoader never needs.
            size = getattr(batch_sampler, "batch_size", None)
            if sampler is not None or drop_last or (size is not None and _int("batch_size", batch_size) != 1):
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last (as DataLoader says): the batch sampler makes the batches")
            batch_size = _int("batch_sampler.batch_size", size) if size is not None else batch_size
        return _UserOrder(sampler, batch_sampler, generator, batch_size)

    def __len__(self):
        """Batches per epoch: this rank's, or with a sampler DataLoader's
        count, len(sampler) in batches (len(batch_sampler))."""
        if self._order is not None:
            if self._order.batch_sampler is not None:
                return len(self._order.batch_sampler)
            n = len(self._order)
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return self._core.batches_per_epoch

    @property
    def samples_per_epoch(self):
        """This rank's samples per epoch, padding included (with a sampler:
        of the epoch read last)."""
        return self._core.samples_per_epoch

    @property
    def shuffle_mode(self):
        """The shuffle in effect: 'full', 'block' or 'none' ('auto' resolved)."""
        return self._core.shuffle_mode

    @property
    def shape(self):
        """(C, H, W) of every sample."""
        return self._core.shape

    @property
    def epoch(self):
        """The epoch being read while an iteration is in progress, else the
        epoch the next iteration reads: the one set with set_epoch; else the
        one after the last iteration's if that reached its end, or the same
        one again if it stopped early (a new iteration is a new pass over the
        same epoch, as with DataLoader). The core keeps these rules
        (Loader::BeginPass); this package keeps no position of its own."""
        return self._core.pass_epoch

    def set_epoch(self, epoch):
        """The epoch the next iteration reads (its shuffle and augmentation;
        with a sampler, also the sampler's: its set_epoch(epoch), as DataLoader
        scripts call it). After load_state_dict, iterations of the saved epoch
        resume mid-way."""
        epoch = _int("epoch", epoch)
        if epoch < 0:
            raise ValueError("epoch must be >= 0, not %d" % epoch)
        if self._order is not None:
            self._order.set_epoch(epoch)
        self._core.set_epoch(epoch)
        self._scheduled_size()

    def set_size(self, size):
        """The output side (square) from the next iteration on, as a
        resolution schedule changes it between epochs: the crop's of
        'train' and RandomCrop, 'val''s CenterCrop (its Resize then
        round(size / 0.875)), 'resize''s. Pixels are those of a loader made
        with that size (torchvision's); a JPEG is decoded at the DCT scale
        the size allows, so small sides decode faster. state_dict() keeps
        it. Between iterations (or after one's end) only: ValueError inside
        an unfinished one, and for raw records read as stored."""
        self._core.set_size(_int("size", size))

    def _scheduled_size(self):
        """With size=ResolutionSchedule: the side of the epoch the next
        iteration reads, unless it resumes a saved one mid-way (that keeps
        the side it was saved at)."""
        if self._schedule is not None and not self._core.pass_resumes:
            self._core.set_size(self._schedule(self._core.pass_epoch))

    @property
    def sampler(self):
        """What DDP scripts call ``loader.sampler.set_epoch(epoch)`` on: the
        sampler given (with a batch_sampler, the sampler inside it, as torch's
        BatchSampler holds one); else the loader's own order (``set_epoch`` is
        the loader's; ``len`` is this rank's samples per epoch, as
        DistributedSampler's, or after load_state_dict what is left of the
        saved epoch)."""
        if self._order is not None:
            return self._order.sampler if self._order.sampler is not None else self._order.inner
        return _Sampler(self)

    @property
    def batch_sampler(self):
        """The batch_sampler given, else None."""
        return self._order.batch_sampler if self._order is not None else None

    @property
    def dataset(self):
        """The whole dataset (all ranks' records) as a shardkit.Dataset:
        ``len(loader.dataset)``, ``.classes``, as scripts use DataLoader's."""
        if self._dataset is None:
            self._dataset = Dataset(self.path)
        return self._dataset

    def __iter__(self):
        for images, labels, _, _ in self.batches():
            yield images, labels

    def batches(self):
        """Like iterating, with more per batch: (images, labels, sample_ids,
        real_size), where sample_ids are the global record numbers and the
        first real_size samples are not padding."""
        import torch

        token = self._begin_iteration()
        try:
            if self._order is not None:
                self._core.end_pass()  # an iteration left unfinished is over: where does the next start?
                if not self._core.pass_resumes:  # a restored epoch reads the order its state saved
                    self._core.set_epoch_order(self._core.pass_epoch, self._order.draw())
            self._scheduled_size()
            self._core.begin_pass()
            while True:
                if self._active is not token:  # before taking a batch that belongs to the newer one
                    raise RuntimeError("shardkit.Loader: this iteration was superseded by a newer one "
                                       "(iter(loader) again): a loader has one position in its epoch, "
                                       "so only its latest iteration yields batches")
                batch = self._core.next()
                if batch is None:
                    break
                images, labels, ids, real = batch
                if self._device is not None:
                    images, labels = self._device.copy(images, labels)
                else:
                    images, labels = torch.from_numpy(images), torch.from_numpy(labels)
                if self._to_float is not None:  # torchvision's values: x.to(dtype) / 255
                    images = images.to(self._to_float[0])
                    if self._to_float[1]:
                        images.div_(255)
                if self.pin_memory:
                    images = images.pin_memory()
                yield images, labels, torch.from_numpy(ids), real
        finally:
            if self._device is not None:
                self._device.finish()
            with self._lock:
                if self._active is token:
                    self._active = None
                    self._core.end_pass()
            self._log_skips()

    def _begin_iteration(self):
        """Marks a new iteration as the loader's one; refused while a thread
        other than this one iterates it (they would share, and steal from each
        other, the one position in the epoch)."""
        me = threading.current_thread()
        with self._lock:
            active = self._active
            if active is not None and active[0] is not me and active[0].is_alive():
                raise RuntimeError("shardkit.Loader: already being iterated by thread %r; a loader has "
                                   "one position in its epoch, so iterate it from one thread at a time "
                                   "(or give each thread its own Loader)" % active[0].name)
            token = (me, object())
            self._active = token
            return token

    def _log_skips(self):
        """Skipped corrupt records reach the logs: the count, and the first ones by name."""
        stats = self._core.stats()
        replaced = stats["samples_replaced"]
        if replaced > self._skipped_logged:
            first = stats.get("corrupt_messages", [])[:3]
            _log.warning("shardkit.Loader: %d sample(s) replaced on rank %d so far (on_corrupt='skip'): "
                         "%d corrupt record(s), from %d damage(s) (a record, or a compressed block); "
                         "first: %s", replaced, self.rank, stats["corrupt_records"],
                         stats.get("corrupt_units", 0), "; ".join(first) or "-")
            self._skipped_logged = replaced

    def state_dict(self):
        """Where the loader is, and what decides its batches (the C++ core's
        LoaderState, as a dict): inside an iteration, the next batch of it;
        between iterations, where the next iteration starts. A new loader
        given this state continues with exactly the batches this one would
        have yielded next. With a sampler: mid-way through an epoch, the
        epoch's indices as drawn ("order": the rest is read from them, not
        drawn again), and under "sampler" what the next epochs' draws depend
        on: the sampler's own state_dict() where it has one, else the state
        of its generator (generator=), and of the loader's generator. A
        sampler drawing from torch's global RNG draws from wherever the
        script leaves that RNG (torch.get_rng_state() is the script's to
        keep, as with DataLoader)."""
        state = json.loads(self._core.state())
        if self._order is not None:
            state["sampler"] = self._order.state()
        return state

    def load_state_dict(self, state):
        """Continue from `state` (from state_dict): every iteration of its
        epoch starts at its batch until one reaches the epoch's end, so a
        peek (``next(iter(loader))``) or ``set_epoch`` with the saved epoch
        does not lose the position. The state may come from a run on another
        number of ranks, batch size or worker count (a job requeued onto
        other nodes): the epoch then continues with exactly the records that
        run had not read, dealt to this run's ranks, each once and with the
        same augmentation. With the same number of ranks and batch size the
        epoch continues at the saved batch, whose number it keeps
        (``len(loader)`` stays the epoch's); cut again for other ones, the
        rest's batches are numbered from 0 and ``len(loader)`` is their
        count. ``loader.sampler`` yields what is left either way. The core
        checks the state (same dataset and seed; mid-epoch, the same shuffle
        and transform) and raises ValueError saying what differs. With a
        sampler: the rest of the saved epoch is read from the indices the
        state holds (no draw), and the sampler's (and generator's) saved
        state is restored into this loader's, so the next epochs draw what
        the saved run would have; the state of rank 0 of a DistributedSampler
        resumes any rank of it (its indices drawn again for this rank)."""
        if not isinstance(state, dict):
            raise ValueError("not a shardkit loader state: %r is not a dict" % type(state).__name__)
        state = dict(state)
        sampler_state = state.pop("sampler", None)
        if self._order is not None and sampler_state:
            state = self._order.order_for_this_rank(state, sampler_state)
        try:
            text = json.dumps(state)
        except (TypeError, ValueError) as e:
            raise ValueError("not a shardkit loader state: %s" % e) from None
        self._core.restore(text)
        if self._order is not None and sampler_state:
            self._order.load_state(sampler_state)
        with self._lock:
            if self._active is None:  # between iterations: state_dict is where the next one starts
                self._core.end_pass()

    def stats(self):
        """Seconds per stage summed over workers (read, decompress, decode,
        transform), the consumer's wait, and counts. Under on_corrupt='skip',
        since the loader was made: ``corrupt_records``, the distinct records
        found corrupt (one failing again, as another sample's replacement or
        in a later epoch, counts once); ``samples_replaced``, the samples
        delivered with another record in their place (``corrupt_skipped`` is
        its old name, the same number); ``corrupt_units``, the distinct
        damages (a record, or a compressed block however many records it
        held); ``corrupt_messages``, the first few. ``fills_alone`` and
        ``fills_shared``: the fills (one batch or more each) the loader's
        producer thread did alone and with the whole worker team (it measures
        both and uses the faster), and ``fill_settled``, whether it has
        measured both yet (always true with one worker)."""
        return self._core.stats()

    def reset_stats(self):
        self._core.reset_stats()


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
