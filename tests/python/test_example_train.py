"""examples/train_imagenet.py, the studies' DDP script, runs on both loaders:
two gloo ranks (one launched as torchrun does, one as srun does) for a few
steps each, and a checkpointed run resumed mid-epoch continues with the
losses of the uninterrupted run."""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import BUILD, tool, shardkit_module
from test_binding import make_jpegs

pytest.importorskip("torchvision")
shardkit_module()
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_imagenet.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    make_jpegs(str(root / "jpegs"), n=48)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(root / "jpegs"), str(root / "shards")],
                   check=True, capture_output=True)
    return root


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args, world, launcher, tmp_path, timeout=300):
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_NUM_THREADS="1")
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
            env.pop(k, None)
        if launcher == "torchrun":
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        else:
            env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(world), SLURM_LOCALID=str(rank))
        log = open(str(tmp_path / ("rank%d.log" % rank)), "w")
        procs.append((subprocess.Popen([sys.executable, SCRIPT] + args, env=env, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise
        log.close()
    out = open(str(tmp_path / "rank0.log")).read()
    assert codes == [0] * world, out + open(str(tmp_path / ("rank%d.log" % (world - 1)))).read()
    return out


COMMON = ["--arch", "resnet18", "--batch-size", "4", "--workers", "1", "--image-size", "32",
          "--epochs", "2", "--print-every", "2"]


@pytest.mark.parametrize("loader,launcher", [("shardkit", "srun"), ("pytorch", "torchrun")])
def test_two_gloo_ranks_train_with_each_loader(data, tmp_path, loader, launcher):
    src = str(data / ("shards" if loader == "shardkit" else "jpegs"))
    out = run_ranks(["--loader", loader, "--data", src, "--val", src] + COMMON, 2, launcher, tmp_path)
    summary = json.loads(out.strip().splitlines()[-1])
    # 48 records (the pytorch set holds as many), 2 ranks x batch 4: 6 steps an epoch, 2 epochs.
    assert summary["loader"] == loader and summary["ranks"] == 2 and summary["steps"] == 12
    assert summary["images_per_s"] > 0 and 0 <= summary["data_wait_fraction"] <= 1
    # The second epoch's own figures (what scripts/gpu_kit.sh compares).
    assert summary["last_epoch_images_per_s"] > 0 and 0 <= summary["last_epoch_data_wait_fraction"] <= 1
    assert 0 <= summary["val_top1"] <= 1


def losses(out):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step (\d+) loss ([0-9.]+)", out)}


def test_resume_mid_epoch_continues_the_uninterrupted_run(data, tmp_path):
    src = str(data / "shards")  # 48 records, 2 ranks x batch 4: 6 steps per epoch
    args = ["--loader", "shardkit", "--data", src, "--log-steps"] + COMMON
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out = run_ranks(args + ["--max-steps", "9"], 2, "srun", tmp_path / "a")
    whole = losses(out)
    # The first epoch (start-up) and 3 steps of the second: no last-epoch figures.
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["last_epoch_images_per_s"] is None and summary["last_epoch_data_wait_fraction"] is None
    ckpt = str(tmp_path / "ckpt.pt")
    run_ranks(args + ["--max-steps", "3", "--checkpoint", ckpt], 2, "srun", tmp_path / "b")
    resumed = losses(run_ranks(args + ["--max-steps", "9", "--checkpoint", ckpt, "--resume"], 2, "srun",
                               tmp_path / "b"))
    assert sorted(resumed) == [4, 5, 6, 7, 8, 9]
    for s in resumed:
        assert resumed[s] == pytest.approx(whole[s], rel=1e-4, abs=1e-5), (s, resumed, whole)
