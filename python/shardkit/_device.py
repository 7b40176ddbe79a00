"""Batches straight to a GPU (shardkit.Loader(device=...)): each copied from
its pinned ring slot on a side stream, the ring slot kept until its copy is
done."""


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
