"""DataLoader's arguments translated into shardkit.Loader's: the keywords
that mean nothing here (refused with the reason, or accepted and ignored),
num_workers and prefetch_factor, and a sampler or batch_sampler checked as
DataLoader checks them."""
from ._convert import _int
from ._samplers import _UserOrder
from ._shardkit import _MAX_PREFETCH

# DataLoader arguments that have no meaning here, and why.
_NO_EQUIVALENT = {
    "collate_fn": "batches are already collated: uint8 images [B, C, H, W] and int64 labels [B]",
    "worker_init_fn": "the workers are C++ threads that run no Python",
}
# DataLoader arguments accepted for a script's sake, with nothing to do here.
_NO_EFFECT = ("persistent_workers", "multiprocessing_context", "timeout", "pin_memory_device")


def _refuse_unknown(dataloader_args):
    """A TypeError for a keyword that is neither shardkit.Loader's nor one of
    DataLoader's accepted for a script's sake."""
    for name in dataloader_args:
        if name in _NO_EQUIVALENT:
            raise TypeError("shardkit.Loader has no %s: %s" % (name, _NO_EQUIVALENT[name]))
        if name not in _NO_EFFECT:
            raise TypeError("shardkit.Loader got an unexpected keyword argument %r" % name)


def _workers(workers, num_workers):
    """workers=, or DataLoader's num_workers= (0 counts as 1: there is no
    "main process" loading here); None when neither is given."""
    if workers is not None and num_workers is not None:
        raise ValueError("give workers or num_workers, not both")
    if num_workers is not None:
        num_workers = _int("num_workers", num_workers)
        if num_workers < 0:  # as DataLoader says
            raise ValueError("num_workers must be non-negative, not %d" % num_workers)
        workers = max(1, num_workers)
    return workers


def _prefetch(prefetch, prefetch_factor, workers):
    """The batches decoded ahead: prefetch=, or DataLoader's prefetch_factor=,
    which is per worker process, times the workers (at most the core's
    limit)."""
    if prefetch_factor is None:
        return prefetch
    prefetch_factor = _int("prefetch_factor", prefetch_factor)
    if prefetch_factor < 1:
        raise ValueError("prefetch_factor must be at least 1, not %d" % prefetch_factor)
    return min(prefetch_factor * max(1, _int("workers", workers)), _MAX_PREFETCH)


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
