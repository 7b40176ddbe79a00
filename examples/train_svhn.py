#!/usr/bin/env python3
"""The SVHN study's DDP script, and its port to shardkit: torchvision's ResNet-50
(its 1000-way head, on 32x32 images) trained on SVHN's train_32x32.mat with
DistributedDataParallel, batch 512 per rank, ToTensor() only, a
DistributedSampler without set_epoch and num_workers=0. --loader pytorch is
the study's data path (torchvision.datasets.SVHN + DataLoader); --loader
shardkit is the port, which changes only the loader lines and keeps the
study's DistributedSampler as it is (shardkit.Loader(..., sampler=sampler)).

    # the study's: SVHN's folder (train_32x32.mat), one task per GPU
    srun python3 examples/train_svhn.py --loader pytorch --data /data/svhn
    # the port: the shards made once (on one node), read in the sampler's order
    shardkit-pack svhn /data/svhn/train_32x32.mat /gpfs/ds/svhn-train
    srun python3 examples/train_svhn.py --loader shardkit --data /gpfs/ds/svhn-train

Ranks come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or from a bare srun
(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the rendezvous at the job's first
node, port 20000 + job id % 12000, unless MASTER_ADDR/MASTER_PORT say
otherwise), over NCCL on GPUs and Gloo on CPUs: what the study ran over MPI
(init_process_group("mpi")) and Horovod, which Debian's PyTorch has neither
of. The port's loader reads the indices the study's DistributedSampler
yields (its seed, no set_epoch: the same order every epoch, as the study's
script read), so every rank gets the study's batches in every epoch.
--record FILE saves every step's (epoch, labels, images) per rank, for the
tests that compare the two.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision

# The ranks' set-up and end, shared with the ImageNet script beside this one.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_imagenet import finish, setup_distributed  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", choices=["shardkit", "pytorch"])
    p.add_argument("--data", help="SVHN's folder (pytorch) or shards (shardkit)")
    p.add_argument("--seed", type=int, default=0, help="DistributedSampler's seed")
    p.add_argument("--arch", default="resnet50", help="a torchvision model")
    p.add_argument("--num-classes", type=int, default=1000, help="torchvision's default head")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=512, help="per rank")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    p.add_argument("--trust-files", action="store_true",
                   help="skip torchvision's MD5 check of the .mat files (files made by tests)")
    p.add_argument("--record", help="save every step's (epoch, labels, images) to FILE.rankN")
    args = p.parse_args(argv)
    if args.loader is None or args.data is None:
        p.error("give --loader and --data")
    return args


def study_loader(args):
    """The study's: SVHN, ToTensor only, DistributedSampler (no set_epoch), num_workers=0."""
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms

    svhn = torchvision.datasets.SVHN
    if args.trust_files:
        svhn = type("SVHN", (svhn,), {"_check_integrity": lambda self: True})
    dataset = svhn(args.data, split="train", transform=transforms.ToTensor())
    sampler = DistributedSampler(dataset, seed=args.seed)
    return DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)


def shardkit_loader(args):
    """The port: the same batches, from `shardkit-pack svhn`'s shards, with the study's sampler kept."""
    import shardkit
    from torch.utils.data import DistributedSampler
    from torchvision import transforms

    dataset = shardkit.Dataset(args.data)
    sampler = DistributedSampler(dataset, seed=args.seed)
    return shardkit.Loader(args.data, args.batch_size, transform=transforms.ToTensor(), sampler=sampler)


def main():
    args = parse_args()
    rank, world, _, device = setup_distributed()
    torch.manual_seed(args.seed)
    loader = study_loader(args) if args.loader == "pytorch" else shardkit_loader(args)
    model = torchvision.models.__dict__[args.arch](num_classes=args.num_classes).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                      else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, images, start, record = 0, 0, time.perf_counter(), []
    for epoch in range(args.epochs):  # no set_epoch: the study's script had none
        for x, y in loader:
            if args.record:
                record.append((epoch, y.clone(), x.clone()))
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            steps, images = steps + 1, images + x.shape[0]
            if steps == args.max_steps:
                break
        if steps == args.max_steps:
            break
    seconds = time.perf_counter() - start
    if args.record:
        torch.save(record, "%s.rank%d" % (args.record, rank))
    if rank == 0:
        print(json.dumps({"loader": args.loader, "ranks": world, "steps": steps,
                          "images_per_s_per_rank": images / seconds if seconds > 0 else 0.0}), flush=True)
    finish()


if __name__ == "__main__":
    main()
