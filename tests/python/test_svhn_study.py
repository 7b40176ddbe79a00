"""The SVHN study's DDP script (examples/train_svhn.py --loader pytorch:
torchvision.datasets.SVHN, ToTensor only, DistributedSampler without
set_epoch, num_workers=0) and its port (--loader shardkit), on 2 ranks over
Gloo on the CPU: every step of 3 epochs on each rank, the port's batch
equals the original's, labels and pixels, bit for bit. The port reads
`shardkit-pack svhn`'s dataset as packed, in the order of the study's own
DistributedSampler, which it keeps (sampler=): nothing re-packed.

Also: the scaling report's weak- and strong-scaling tables, fed the study's
published figures, give its efficiencies (67% weak, 40% strong at 4 nodes)."""
import os
import socket
import subprocess

import numpy as np
import pytest

from conftest import BUILD, shardkit_module, tool

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
scipy_io = pytest.importorskip("scipy.io")
shardkit_module()  # the example scripts import the binding: skip without it

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_svhn.py")
WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args, launcher, tmp_path, name):
    """WORLD ranks of the script, started as torchrun or a bare srun would."""
    port = str(free_port())
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1")
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                  "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID"):
            env.pop(k, None)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        if launcher == "torchrun":
            env.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank))
        else:
            env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(WORLD), SLURM_LOCALID=str(rank))
        log = open(str(tmp_path / ("%s%d.log" % (name, rank))), "w")
        procs.append((subprocess.Popen(["/usr/bin/python3", SCRIPT] + [str(a) for a in args], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    for p, log in procs:
        try:
            code = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise
        log.close()
        assert code == 0, open(log.name).read()


def test_the_ports_batches_and_epochs_are_the_study_scripts_on_2_ranks(tmp_path):
    rng = np.random.default_rng(11)
    n = 45  # 23 per rank (one padded), batches of 8, 8 and 7
    X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = rng.integers(1, 11, (n, 1)).astype(np.float64)
    (tmp_path / "svhn").mkdir()
    scipy_io.savemat(str(tmp_path / "svhn" / "train_32x32.mat"), {"X": X, "y": y}, do_compression=True)
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "svhn", str(tmp_path / "svhn" / "train_32x32.mat"),
                    str(tmp_path / "packed")], check=True, capture_output=True)
    common = ["--arch", "resnet18", "--num-classes", "10", "--batch-size", 8, "--epochs", 3]
    run_ranks(["--loader", "pytorch", "--data", tmp_path / "svhn", "--trust-files",
               "--record", tmp_path / "original"] + common, "torchrun", tmp_path, "original")
    run_ranks(["--loader", "shardkit", "--data", tmp_path / "packed", "--record", tmp_path / "port"] + common,
              "srun", tmp_path, "port")
    for rank in range(WORLD):
        original = torch.load(str(tmp_path / ("original.rank%d" % rank)))
        port = torch.load(str(tmp_path / ("port.rank%d" % rank)))
        assert [e for e, _, _ in original] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        assert [(e, len(l)) for e, l, _ in port] == [(e, len(l)) for e, l, _ in original], rank
        for step, ((_, lo, xo), (_, lp, xp)) in enumerate(zip(original, port)):
            assert xo.dtype == xp.dtype == torch.float32 and xo.shape == xp.shape
            assert torch.equal(lo, lp), (rank, step)
            assert torch.equal(xo, xp), (rank, step, "pixels differ")
        # No set_epoch in the script: epochs 1 and 2 repeat epoch 0, in both.
        assert all(torch.equal(a[2], b[2]) for a, b in zip(port[:3] * 2, port[3:]))


def test_the_scaling_report_gives_the_studys_efficiencies_from_its_figures(tmp_path):
    """The study's published images/s: 2,076 on 1 node; weak (512 per GPU)
    3,035 and 5,549 on 2 and 4; strong (512 in all) 2,829 and 3,323."""
    runs = {(1, 512): 2076, (2, 512): 3035, (4, 512): 5549, (2, 256): 2829, (4, 128): 3323}
    for (nodes, batch), ips in runs.items():
        line = ('{"nodes": %d, "world_size": %d, "workers": 4, "batch_size": %d, "seconds": 10, '
                '"images_per_sec": %d}\n' % (nodes, nodes, batch, ips))
        (tmp_path / ("n%d_r1_w4_b%d.jsonl" % (nodes, batch))).write_text(line)
    out = subprocess.run([tool("tools", "report", "shardkit-report"), str(tmp_path), "--out",
                          str(tmp_path / "report")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    md = open(str(tmp_path / "report" / "report.md")).read()
    weak = md.split("### Weak scaling: batch per rank 512")[1].split("###")[0]
    strong = md.split("### Strong scaling: global batch 512")[1].split("###")[0]
    assert "| 4 | 4 | 512 | 2048 | 5549 | 2.67x | 67% |" in weak, weak
    assert "| 2 | 2 | 512 | 1024 | 3035 | 1.46x | 73% |" in weak, weak
    assert "| 4 | 4 | 128 | 512 | 3323 | 1.60x | 40% |" in strong, strong
    assert "| 2 | 2 | 256 | 512 | 2829 | 1.36x | 68% |" in strong, strong
    csv = open(str(tmp_path / "report" / "scaling.csv")).read().splitlines()
    assert csv[0] == "scaling,nodes,ranks,workers,batch,global_batch,images_per_sec,speedup,efficiency"
    assert len(csv) == 1 + 3 + 3
