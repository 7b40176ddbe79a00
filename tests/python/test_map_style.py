"""Map-style access costs a record, not a block: shardkit.Dataset[i] over a
zstd dataset, in order or at random, decompresses each block once (counted
by the core), also across a torch DataLoader's forked workers, which share
the blocks their parent's Dataset holds; every record comes back exactly,
through a DataLoader with a DistributedSampler too; a small bound on the
decompressed blocks is kept and still reads right; indices are what Python
indexes sequences with."""
import random

import numpy as np
import pytest

from conftest import shardkit_module

sk = shardkit_module()
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def zstd_ds(tmp_path_factory):
    """600 raw 20x20x3 records in shards of 64 KB, a zstd block or two each;
    record i holds pseudo-random bytes seeded by i."""
    path = str(tmp_path_factory.mktemp("map") / "raw")
    records = [np.random.default_rng(i).integers(0, 256, (20, 20, 3), dtype=np.uint8) for i in range(600)]
    with sk.Writer(path, kind="raw_u8", shape=(20, 20, 3), classes=["a", "b", "c"], shard_size=64 << 10,
                   compression="zstd") as w:
        for i, r in enumerate(records):
            w.add(r, i % 3)
    return path, records


def blocks_of(path):
    """The dataset's blocks: those a fresh Dataset decompresses reading every record once."""
    ds = sk.Dataset(path)
    for i in range(len(ds)):
        ds[i]
    return ds._core.blocks_decompressed


def test_every_record_in_order_and_at_random_decompresses_each_block_once(zstd_ds):
    path, records = zstd_ds
    blocks = blocks_of(path)
    assert 5 < blocks < len(records) // 4  # many blocks, several records each
    ds = sk.Dataset(path)
    order = list(range(len(ds)))
    random.Random(1).shuffle(order)
    for i in order + list(range(len(ds))) + order:
        payload, label = ds[i]
        assert np.array_equal(payload, records[i]) and label == i % 3
    assert ds._core.blocks_decompressed == blocks


def test_a_small_bound_is_kept_and_reads_right(zstd_ds):
    path, records = zstd_ds
    blocks = blocks_of(path)
    ds = sk.Dataset(path, block_cache_bytes=1)  # the block being read, no more
    for i in range(len(ds)):  # in order: each block once even so
        assert np.array_equal(ds[i][0], records[i])
    assert ds._core.blocks_decompressed == blocks
    order = list(range(len(ds)))
    random.Random(2).shuffle(order)
    for i in order:
        assert np.array_equal(ds[i][0], records[i])
    assert ds._core.blocks_decompressed > blocks  # blocks came and went
    with pytest.raises(ValueError, match="block_cache_bytes"):
        sk.Dataset(path, block_cache_bytes=-1)


def test_indices_as_python_indexes_sequences(zstd_ds):
    path, records = zstd_ds
    ds = sk.Dataset(path)
    assert np.array_equal(ds[np.int64(5)][0], records[5])
    assert np.array_equal(ds[torch.tensor(7)][0], records[7])
    assert np.array_equal(ds[-1][0], records[-1])
    with pytest.raises(IndexError):
        ds[len(records)]
    with pytest.raises(TypeError):
        ds[1.5]


def test_a_dataloader_with_a_distributed_sampler_and_workers_gets_every_record_exactly(zstd_ds):
    from torch.utils.data import DataLoader, DistributedSampler

    path, records = zstd_ds
    ds = sk.Dataset(path)
    for epoch in range(2):  # workers started anew each epoch: the blocks are still shared
        seen = {}
        for rank in range(2):
            sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
            sampler.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2)
            indices = list(iter(sampler))
            got = [x for x, _ in loader]
            images = torch.cat(got).numpy()
            for k, i in enumerate(indices):
                assert np.array_equal(images[k], records[i]), (epoch, rank, i)
                seen[i] = True
        assert sorted(seen) == list(range(len(records)))
    # The parent read nothing itself: its workers filled the blocks it shares with them.
    assert ds._core.blocks_decompressed == 0
    ds[0]
    assert ds._core.blocks_decompressed == 0


def test_a_jpeg_record_is_its_bytes(tmp_path, photos):
    path = str(tmp_path / "jpeg")
    files = photos[:3]
    with sk.Writer(path, kind="jpeg", classes=["x"]) as w:
        for f in files:
            w.add(open(f, "rb").read(), 0, key=f)
    ds = sk.Dataset(path)
    for i in range(len(ds)):
        payload, label = ds[i]
        assert payload[:2] == b"\xff\xd8" and label == 0
    assert ds._core.blocks_decompressed == 0  # stored: read, never decompressed
