"""shardkit.Loader: the C++ loader with DataLoader's arguments and PyTorch's
conventions (torch tensors, set_epoch, state_dict)."""
import json
import os
import threading
import warnings

from . import transforms
from ._convert import _int, _path
from ._dataloader_args import _prefetch, _refuse_unknown, _user_order, _workers
from ._dataset import Dataset
from ._device import _DeviceCopies
from ._environment import _default_workers, _distributed_defaults
from ._messages import _log, _once
from ._samplers import _Sampler
from ._shardkit import ResolutionSchedule, _Loader


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

        _refuse_unknown(dataloader_args)
        workers = _workers(workers, num_workers)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if distributed is not None and not isinstance(distributed, bool):
            raise ValueError("distributed must be True, False or None, not %r" % (distributed,))
        self._order = _user_order(sampler, batch_sampler, generator, batch_size, shuffle, drop_last,
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
        prefetch = _prefetch(prefetch, prefetch_factor, workers)
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
