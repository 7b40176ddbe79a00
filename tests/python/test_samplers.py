"""shardkit.Loader(sampler=..., batch_sampler=...) as DataLoader reads them:
each iteration the sampler's indices, in its order, batch for batch equal to
DataLoader's (images and labels, byte for byte) with a DistributedSampler on
2 ranks, a WeightedRandomSampler (its own generator, or torch's global RNG)
and a curriculum sampler written here, over 3 epochs; a state_dict taken
mid-epoch continues in a new loader with exactly the rest of the epoch and
the epochs after it; workers, prefetch and on_corrupt="skip" work as with
the loader's own orders; and what cannot be meant is refused."""
import os
import subprocess

import numpy as np
import pytest

from conftest import shardkit_module, tool

sk = shardkit_module()
torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler, Sampler,  # noqa: E402
                              SequentialSampler, WeightedRandomSampler)
from torchvision import transforms as TV  # noqa: E402

N = 45  # records: 23 and 22 per rank of 2, a short last batch of 4
BATCH = 4
EPOCHS = 3


@pytest.fixture(scope="module")
def raw_ds(tmp_path_factory):
    """N raw 8x8x3 records of random pixels (each one distinct), zstd blocks in 3 shards."""
    path = str(tmp_path_factory.mktemp("raw") / "ds")
    rng = np.random.default_rng(3)
    with sk.Writer(path, kind="raw_u8", shape=(8, 8, 3), classes=[str(c) for c in range(10)],
                   shard_size=4096) as w:
        for i in range(N):
            w.add(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), i % 10, key="r%d" % i)
    return path


@pytest.fixture(scope="module")
def jpeg_ds(tmp_path_factory):
    from test_binding import make_jpegs

    root = tmp_path_factory.mktemp("jpeg")
    make_jpegs(str(root / "src"), n=N, seed=5)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "src"), str(root / "ds"),
                    "--shard-size", "65536"], check=True, capture_output=True)
    return str(root / "ds")


class RawRecords(torch.utils.data.Dataset):
    """The map-style dataset a DataLoader script reads: record i as CHW uint8 and its label."""

    def __init__(self, path):
        self.ds = sk.Dataset(path)

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        x, y = self.ds[i]
        return torch.from_numpy(np.array(x)).permute(2, 0, 1).contiguous(), y


class Pixels(torch.utils.data.Dataset):
    """Record i's pixels under a deterministic transform, as the loader makes
    them (read once, in dataset order), and its label."""

    def __init__(self, path, transform):
        self.items = {}
        loader = sk.Loader(path, 8, transform=transform, shuffle=False, rank=0, world_size=1)
        for images, labels, ids, real in loader.batches():
            for k in range(real):
                self.items[int(ids[k])] = (images[k].clone(), int(labels[k]))
        assert len(self.items) == N

    def __len__(self):
        return N

    def __getitem__(self, i):
        return self.items[i]


class Curriculum(Sampler):
    """Easy records first: epoch e reads the (e + 1) / 3 easiest, in an order
    drawn from its own generator (advanced by every iteration), which its
    state_dict keeps."""

    def __init__(self, difficulty, seed):
        self.by_difficulty = sorted(range(len(difficulty)), key=lambda i: difficulty[i])
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _count(self):
        return min(len(self.by_difficulty), len(self.by_difficulty) * (self.epoch + 1) // 3)

    def __len__(self):
        return self._count()

    def __iter__(self):
        easy = self.by_difficulty[:self._count()]
        for k in torch.randperm(len(easy), generator=self.generator).tolist():
            yield easy[k]

    def state_dict(self):
        return {"epoch": self.epoch, "generator": self.generator.get_state().tolist()}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))


def distributed(rank):
    return lambda: DistributedSampler(range(N), num_replicas=2, rank=rank, shuffle=True, seed=11)


def weighted_own_generator():
    g = torch.Generator()
    g.manual_seed(5)
    return WeightedRandomSampler(torch.linspace(0.05, 1.0, N), 31, replacement=True, generator=g)


def weighted_global_rng():
    return WeightedRandomSampler(torch.linspace(1.0, 0.05, N), 29, replacement=True)


def curriculum():
    return Curriculum([(i * 7919) % N for i in range(N)], seed=13)


SAMPLERS = {
    "distributed rank 0": distributed(0),
    "distributed rank 1": distributed(1),
    "weighted, own generator": weighted_own_generator,
    "weighted, torch's global RNG": weighted_global_rng,
    "curriculum": curriculum,
}


def dataloader_epochs(dataset, make_sampler, epochs=EPOCHS, drop_last=False):
    """What DataLoader yields, epoch after epoch, with set_epoch where the sampler has it."""
    torch.manual_seed(1234)
    sampler = make_sampler()
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=drop_last)
    out = []
    for epoch in range(epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        out.append([(x.clone(), y.clone()) for x, y in loader])
    return out


def shardkit_loader(path, make_sampler, transform=None, **kw):
    return sk.Loader(path, BATCH, transform=transform, sampler=make_sampler(), **kw)


def shardkit_epochs(loader, epochs=EPOCHS, first=0):
    out = []
    for epoch in range(first, epochs):
        loader.set_epoch(epoch)
        out.append([(x.clone(), y.clone()) for x, y in loader])
    return out


def assert_same(want, got, what):
    assert [len(e) for e in got] == [len(e) for e in want], what
    for e, (we, ge) in enumerate(zip(want, got)):
        for b, ((x, y), (u, v)) in enumerate(zip(we, ge)):
            assert x.dtype == u.dtype == torch.uint8 and x.shape == u.shape, (what, e, b)
            assert torch.equal(y, v), (what, "epoch %d batch %d: labels differ" % (e, b))
            assert torch.equal(x, u), (what, "epoch %d batch %d: pixels differ" % (e, b))


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_raw_batches_equal_dataloaders_with_the_same_sampler(raw_ds, name):
    want = dataloader_epochs(RawRecords(raw_ds), SAMPLERS[name])
    torch.manual_seed(1234)
    loader = shardkit_loader(raw_ds, SAMPLERS[name], workers=3, prefetch=2)
    assert len(loader) == len(want[0])
    assert_same(want, shardkit_epochs(loader), name)


@pytest.mark.parametrize("name", ["distributed rank 0", "distributed rank 1", "curriculum"])
def test_jpeg_batches_equal_dataloaders_under_a_deterministic_transform(jpeg_ds, name):
    transform = TV.Compose([TV.Resize(40), TV.CenterCrop(32)])
    want = dataloader_epochs(Pixels(jpeg_ds, transform), SAMPLERS[name])
    torch.manual_seed(1234)
    loader = shardkit_loader(jpeg_ds, SAMPLERS[name], transform, workers=2)
    assert_same(want, shardkit_epochs(loader), name)
    assert loader.stats()["queued_reads"] > 0, "the sampler's records are read ahead"


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_mid_epoch_state_continues_with_the_rest_and_the_epochs_after(raw_ds, name):
    """A run stopped after 3 batches of epoch 1 (its checkpoint: the loader's
    state_dict and, as a script keeps it, torch's RNG state) and started
    again with new sampler objects reads what the uninterrupted run read."""
    torch.manual_seed(1234)
    whole = shardkit_epochs(shardkit_loader(raw_ds, SAMPLERS[name], workers=2))
    torch.manual_seed(1234)
    first = shardkit_loader(raw_ds, SAMPLERS[name], workers=2)
    before = shardkit_epochs(first, epochs=1)
    first.set_epoch(1)
    it = iter(first)
    before.append([(x.clone(), y.clone()) for x, y in (next(it) for _ in range(3))])
    state, rng = first.state_dict(), torch.get_rng_state()
    assert state["epoch"] == 1 and state["batch"] == 3 and state["shuffle"] == "given"
    assert len(state["order"]) == sum(len(y) for _, y in whole[1])
    del it, first

    torch.manual_seed(999)  # a new process: another RNG state until the checkpoint's is restored
    second = shardkit_loader(raw_ds, SAMPLERS[name], workers=3, prefetch=3)
    second.load_state_dict(state)
    torch.set_rng_state(rng)
    rest = [(x.clone(), y.clone()) for x, y in second]  # no set_epoch: the restored epoch, from batch 3
    after = shardkit_epochs(second, first=2)
    assert_same(whole, [before[0], before[1] + rest] + after, name)


def test_a_checkpoint_of_rank_0_resumes_rank_1_of_a_distributed_sampler(raw_ds):
    """DDP scripts save on rank 0: rank 1 gets rank 0's state, whose order is
    rank 0's; a DistributedSampler's order for rank 1 is drawn again."""
    whole = shardkit_epochs(shardkit_loader(raw_ds, distributed(1)), epochs=2)
    zero = shardkit_loader(raw_ds, distributed(0))
    zero.set_epoch(1)
    it = iter(zero)
    next(it)
    next(it)
    state = zero.state_dict()
    one = shardkit_loader(raw_ds, distributed(1))
    one.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in one]
    assert_same([whole[1][2:]], [rest], "rank 1 from rank 0's state")
    # Another sampler's order cannot be drawn again for this rank.

    class Sharded(SequentialSampler):
        def __init__(self, rank):
            super().__init__(range(rank, N, 2))
            self.rank, self.num_replicas = rank, 2

    a = sk.Loader(raw_ds, BATCH, transform=None, sampler=Sharded(0))
    it = iter(a)
    next(it)
    with pytest.raises(ValueError, match="rank 0 of 2's sampler.*load each rank's own state_dict"):
        sk.Loader(raw_ds, BATCH, transform=None, sampler=Sharded(1)).load_state_dict(a.state_dict())


def test_batch_sampler_and_drop_last_are_dataloaders(raw_ds):
    dataset = RawRecords(raw_ds)
    for drop_last in (False, True):
        torch.manual_seed(7)
        want = [(x, y) for x, y in DataLoader(dataset, batch_sampler=BatchSampler(distributed(0)(), 4, drop_last))]
        torch.manual_seed(7)
        loader = sk.Loader(raw_ds, transform=None, batch_sampler=BatchSampler(distributed(0)(), 4, drop_last))
        assert len(loader) == len(want) and loader.batch_size == 4
        assert_same([want], [[(x.clone(), y.clone()) for x, y in loader]], "batch_sampler")
        # drop_last with a sampler: DataLoader's BatchSampler(sampler, batch_size, drop_last).
        want = dataloader_epochs(dataset, distributed(0), epochs=1, drop_last=drop_last)
        loader = sk.Loader(raw_ds, BATCH, transform=None, sampler=distributed(0)(), drop_last=drop_last)
        assert len(loader) == len(want[0])
        assert_same(want, shardkit_epochs(loader, epochs=1), "drop_last")
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        sk.Loader(raw_ds, 4, transform=None, batch_sampler=BatchSampler(distributed(0)(), 4, False))
    # A batch sampler without a batch_size attribute takes batch_size=; batches
    # of another size than it, but the last, are not the loader's.
    even = [[0, 1, 2, 3], [9, 8, 7, 6], [5]]
    ids = [b.tolist() for _, _, b, _ in sk.Loader(raw_ds, 4, transform=None, batch_sampler=even).batches()]
    assert ids == even
    uneven = [[0, 1, 2, 3], [4, 5], [6, 7, 8, 9]]
    with pytest.raises(ValueError, match="batch 1 of this epoch holds 2 indices.*batch_size=4"):
        next(iter(sk.Loader(raw_ds, 4, transform=None, batch_sampler=uneven)))


def test_set_epoch_is_forwarded_and_the_sampler_is_dataloaders(raw_ds):
    sampler = distributed(1)()
    loader = sk.Loader(raw_ds, BATCH, transform=None, sampler=sampler)
    assert loader.sampler is sampler and loader.rank == 1 and loader.world_size == 2
    loader.set_epoch(4)
    assert sampler.epoch == 4 and loader.epoch == 4
    ids = [i for _, _, batch_ids, _ in loader.batches() for i in batch_ids.tolist()]
    sampler.set_epoch(4)
    assert ids == list(sampler)
    # The study script's habit: no set_epoch at all reads the sampler's epoch 0 order every epoch.
    still = sk.Loader(raw_ds, BATCH, transform=None, sampler=distributed(0)())
    first = [y.tolist() for _, y in still]
    assert [y.tolist() for _, y in still] == first and still.epoch == 2


def test_skip_policy_and_empty_epochs_with_a_sampler(raw_ds, tmp_path):
    import shutil

    bad = str(tmp_path / "bad")
    shutil.copytree(raw_ds, bad)
    shard = sorted(f for f in os.listdir(bad) if f.endswith(".sks"))[0]
    with open(os.path.join(bad, shard), "r+b") as f:  # a zstd block of the first shard
        f.seek(200)
        f.write(b"\xff" * 64)
    order = list(range(N))
    with pytest.raises(sk.CorruptionError):
        list(sk.Loader(bad, BATCH, transform=None, sampler=order))
    loader = sk.Loader(bad, BATCH, transform=None, sampler=order, on_corrupt="skip", skip_budget=10)
    seen = [ids.tolist() for _, _, ids, _ in loader.batches()]
    assert sum(map(len, seen)) == N and loader.stats()["samples_replaced"] > 0
    assert all(i in order for ids in seen for i in ids)
    # A sampler may yield nothing (a curriculum's epoch 0 of a tiny set): no batch, as DataLoader.
    assert list(sk.Loader(raw_ds, BATCH, transform=None, sampler=[])) == []


def test_what_a_sampler_cannot_mean_is_refused(raw_ds, monkeypatch):
    order = list(range(N))
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        sk.Loader(raw_ds, BATCH, transform=None, sampler=order, shuffle=True)
    with pytest.raises(ValueError, match="world size 2 with orders given.*DistributedSampler"):
        sk.Loader(raw_ds, BATCH, transform=None, sampler=order, rank=0, world_size=2)
    with pytest.raises(ValueError, match="distributed=True with a sampler"):
        sk.Loader(raw_ds, BATCH, transform=None, sampler=order, distributed=True)
    with pytest.raises(TypeError, match="no generator without a sampler"):
        sk.Loader(raw_ds, BATCH, transform=None, generator=torch.Generator())
    with pytest.raises(ValueError, match="index 45 \\(at position 1\\) is not a record"):
        next(iter(sk.Loader(raw_ds, BATCH, transform=None, sampler=[0, N])))
    with pytest.raises(ValueError, match="yielded 0.5"):
        next(iter(sk.Loader(raw_ds, BATCH, transform=None, sampler=[0, 0.5])))
    # The environment's world does not partition a sampler's order: the sampler decides.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = sk.Loader(raw_ds, BATCH, transform=None, sampler=order)
    assert sum(len(y) for _, y in loader) == N
    # A loader of its own orders keeps refusing a state of a given order mid-epoch, and the reverse.
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match="shuffle given -> "):
        sk.Loader(raw_ds, BATCH, transform=None, rank=0, world_size=1).load_state_dict(loader.state_dict())
