"""Loader(device="cuda"): batches copied to the GPU from pinned ring slots on
a side stream. Without CUDA (this machine's Debian PyTorch) the error path;
with a GPU, the batches equal the host loader's, however many go by (a ring
slot reused before its copy finished would show as another batch's pixels).
Run with Debian's /usr/bin/python3 (torch)."""
import numpy as np
import pytest

from conftest import shardkit_module

torch = pytest.importorskip("torch")
sk = shardkit_module()
cuda = torch.cuda.is_available()


@pytest.fixture(scope="module")
def raw_ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("device")
    rng = np.random.default_rng(2)
    with sk.Writer(str(root / "ds"), kind="raw_u8", shape=(16, 12, 3), classes=["a", "b", "c"]) as w:
        for i in range(300):
            w.add(rng.integers(0, 256, (16, 12, 3), dtype=np.uint8), i % 3, key=str(i))
    return str(root / "ds")


def loader(path, **kw):
    return sk.Loader(path, 8, transform=None, rank=0, world_size=1, seed=1, prefetch=2, **kw)


@pytest.mark.skipif(cuda, reason="the no-CUDA error path")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
def test_without_cuda_device_cuda_is_a_clear_error(raw_ds, device):
    with pytest.raises(RuntimeError, match="CUDA is not available here"):
        loader(raw_ds, device=device)


def test_other_devices_are_refused_and_cpu_is_the_host_path(raw_ds):
    with pytest.raises(ValueError, match="'cuda' \\(or 'cuda:N'\\) or stay on the host"):
        loader(raw_ds, device="meta")
    with pytest.raises(RuntimeError):
        loader(raw_ds, device="nonsense")
    host = [x for x, _ in loader(raw_ds)]
    on_cpu = [x for x, _ in loader(raw_ds, device="cpu")]
    assert all(torch.equal(a, b) for a, b in zip(host, on_cpu)) and len(host) == len(on_cpu) == 38


@pytest.mark.skipif(not cuda, reason="needs a GPU")
def test_batches_on_the_gpu_equal_the_host_loaders(raw_ds):
    want = [(x, y) for x, y in loader(raw_ds)]
    gpu = loader(raw_ds, device="cuda")
    for epoch in range(3):  # 38 batches an epoch through a ring of 2: every slot reused many times
        gpu.set_epoch(0)
        got = []
        for x, y in gpu:
            assert x.is_cuda and y.is_cuda and x.dtype == torch.uint8 and y.dtype == torch.int64
            got.append((x * 1, y * 1))  # work on the consumer's stream, as a training step
        torch.cuda.synchronize()
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want):
            assert torch.equal(x.cpu(), wx) and torch.equal(y.cpu(), wy)
    with pytest.raises(ValueError, match="leave pin_memory out"):
        loader(raw_ds, device="cuda", pin_memory=True)
