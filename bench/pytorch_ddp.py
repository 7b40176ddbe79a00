#!/usr/bin/python3
"""The peer for shardkit-train: PyTorch DistributedDataParallel (Gloo, CPU) training
the same CIFAR-style ResNet-20 on Fashion-MNIST, fed by DataLoader over an
in-memory TensorDataset with DistributedSampler, the same threads per rank.

usage: pytorch_ddp.py IMAGES_IDX_GZ LABELS_IDX_GZ --nproc 2 --batch-size 64 --steps 200 --threads 1
Prints one JSON line: images_per_sec (global), data_wait_fraction, ...
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from idx import read_idx
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idn = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + idn)


class ResNet20(nn.Module):
    def __init__(self, cin=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for i in range(3):
                blocks.append(Block(c, planes, stride if i == 0 else 1))
                c = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    x = torch.from_numpy(read_idx(args.images).copy()).unsqueeze(1)
    y = torch.from_numpy(read_idx(args.labels).astype(np.int64))
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=args.nproc, rank=rank, shuffle=True, drop_last=True)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        persistent_workers=args.workers > 0, drop_last=True)
    net = ResNet20()
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)
    model = nn.parallel.DistributedDataParallel(net)
    lr = 0.2 * args.batch_size * args.nproc / 256
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    it = iter(loader)
    wait = compute = 0.0
    n = 0
    t_start = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(loader)
            xb, yb = next(it)
        t1 = time.perf_counter()
        xb = ((xb.float() / 255 - 0.5) / 0.25).contiguous(memory_format=fmt)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        wait += t1 - t0
        compute += t2 - t1
        n += xb.shape[0]
    secs = time.perf_counter() - t_start
    stats = torch.tensor([n, wait, compute], dtype=torch.float64)
    dist.all_reduce(stats)
    if rank == 0:
        print(json.dumps({"peer": "pytorch-ddp", "world_size": args.nproc, "batch_size": args.batch_size,
                          "steps": args.steps, "images_per_sec": stats[0].item() / secs,
                          "data_wait_fraction": stats[1].item() / (stats[1].item() + stats[2].item()),
                          "seconds": secs, "threads": args.threads, "loader_workers": args.workers,
                          "channels_last": args.channels_last}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("images")
    ap.add_argument("labels")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--channels-last", action="store_true", help="model and inputs in channels-last memory format")
    args = ap.parse_args()
    mp.spawn(worker, args=(args, args.port), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
