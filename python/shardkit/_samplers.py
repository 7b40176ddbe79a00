"""Samplers as DataLoader uses them: loader.sampler (the loader's own order,
with DistributedSampler's interface), and a user's sampler or batch_sampler
as the source of each epoch's order, with its state."""


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
