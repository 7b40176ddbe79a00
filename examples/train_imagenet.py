#!/usr/bin/env python3
"""Train a torchvision ResNet on ImageNet-style data with DistributedDataParallel,
from shards (--loader shardkit) or from an ImageFolder with PyTorch's DataLoader
(--loader pytorch): the script the studies wrote, with one line changed.

    # one node, 4 GPUs (torchrun)
    torchrun --nproc_per_node 4 examples/train_imagenet.py --loader shardkit \\
        --data /scratch/imagenet-shards/train --val /scratch/imagenet-shards/val --arch resnet50
    # under SLURM, one task per GPU (MASTER_ADDR/MASTER_PORT exported by the batch script)
    srun python3 examples/train_imagenet.py --loader shardkit --data ... --arch resnet50
    # the same run from JPEG folders
    torchrun --nproc_per_node 4 examples/train_imagenet.py --loader pytorch \\
        --data /data/imagenet/train --val /data/imagenet/val --workers 8

On CPU (here) it trains with gloo; on GPUs with NCCL, AMP and channels_last.
Both loaders hand over uint8 images; normalisation happens on the device, so the
two runs differ only in where the pixels come from. At the end rank 0 prints one
JSON line: images/s and the fraction of the loop spent waiting for data (over the run, and
over its last whole epoch after its first: past start-up; null if none), accuracy.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# The ResNets torchvision builds (and shardkit-train mirrors).
ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "resnext50_32x4d"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", choices=["shardkit", "pytorch"], required=True)
    p.add_argument("--data", required=True, help="shard dataset (shardkit) or ImageFolder root (pytorch)")
    p.add_argument("--val", help="validation set, the same kind as --data")
    p.add_argument("--arch", default="resnet50", choices=ARCHS, metavar="ARCH",
                   help="a torchvision ResNet: " + ", ".join(ARCHS))
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--batch-size", type=int, default=256, help="per rank")
    p.add_argument("--workers", type=int, default=8, help="loader threads (shardkit) or processes (pytorch)")
    p.add_argument("--lr", type=float, default=0.1, help="for a global batch of 256, scaled linearly")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--amp-dtype", choices=["fp16", "bf16"], default="fp16",
                   help="mixed precision on CUDA: fp16 (with loss scaling) or bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--checkpoint", help="checkpoint file (written by rank 0)")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="steps")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--print-every", type=int, default=50)
    p.add_argument("--log-steps", action="store_true", help="print every step's loss (tests compare them)")
    p.add_argument("--json", help="also write the summary JSON line to this file")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "image_size", "print_every", "checkpoint_every"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.workers < 0 or args.max_steps < 0:
        p.error("--workers and --max-steps must be >= 0")
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint")
    if args.resume and not os.path.isfile(args.checkpoint):
        p.error("--checkpoint %s: not a regular file to resume from" % args.checkpoint)
    # An output that exists must be a regular file: a pipe would block the run.
    for flag, path in (("--checkpoint", args.checkpoint), ("--json", args.json)):
        if path and os.path.exists(path) and not os.path.isfile(path):
            p.error("%s %s: exists and is not a regular file" % (flag, path))
    return args


def setup_distributed():
    """torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; srun sets SLURM_PROCID/
    SLURM_NTASKS/SLURM_LOCALID, and without MASTER_ADDR/MASTER_PORT (which a
    batch script may export) the rendezvous is at the job's first node, port
    20000 + job id % 12000, as shardkit-train's. NCCL on GPUs, Gloo on CPUs:
    what replaces init_process_group("mpi") and Horovod. Returns (rank,
    world, local_rank, device)."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if "MASTER_ADDR" not in env and nodes:
            import subprocess

            hosts = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True)
            env["MASTER_ADDR"] = (hosts.stdout.split() or ["127.0.0.1"])[0]
        if "MASTER_PORT" not in env and env.get("SLURM_JOB_ID", "").isdigit():
            env["MASTER_PORT"] = str(20000 + int(env["SLURM_JOB_ID"]) % 12000)
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    local_rank = int(env["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method="env://")
    return dist.get_rank(), dist.get_world_size(), local_rank, device


class PytorchData:
    """ImageFolder + DistributedSampler + DataLoader, uint8 output (PILToTensor)."""

    def __init__(self, root, args, train, rank, world, device):
        from torchvision import transforms as T

        if train:
            tf = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(), T.PILToTensor()])
        else:
            tf = T.Compose([T.Resize(round(args.image_size / 0.875)), T.CenterCrop(args.image_size),
                            T.PILToTensor()])
        self.dataset = torchvision.datasets.ImageFolder(root, tf)
        self.classes = len(self.dataset.classes)
        self.sampler = torch.utils.data.distributed.DistributedSampler(
            self.dataset, num_replicas=world, rank=rank, shuffle=train, seed=args.seed, drop_last=False)
        self.loader = torch.utils.data.DataLoader(
            self.dataset, batch_size=args.batch_size, sampler=self.sampler, num_workers=args.workers,
            pin_memory=device.type == "cuda", persistent_workers=args.workers > 0, drop_last=False)
        self.skip = 0

    def __len__(self):
        return len(self.loader)

    def epoch(self, e):
        self.sampler.set_epoch(e)
        it = iter(self.loader)
        # A DataLoader cannot start mid-epoch: the batches before the resume
        # point are loaded and thrown away.
        for _ in range(self.skip):
            next(it)
        self.skip = 0
        return it

    def state_dict(self, epoch, batch):
        return {"epoch": epoch, "batch": batch}

    def load_state_dict(self, state):
        self.skip = state["batch"]


class ShardkitData:
    """shardkit.Loader over shards: the same uint8 batches, decoded by C++ threads."""

    def __init__(self, path, args, train, rank, world, device):
        import shardkit

        self.loader = shardkit.Loader(
            path, args.batch_size, workers=max(1, args.workers), transform="train" if train else "val",
            size=args.image_size, rank=rank, world_size=world, seed=args.seed,
            layout="NHWC" if device.type == "cuda" else "NCHW")
        self.classes = len(shardkit.Dataset(path).classes)

    def __len__(self):
        return len(self.loader)

    def epoch(self, e):
        self.loader.set_epoch(e)
        return iter(self.loader)

    def state_dict(self, epoch, batch):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


def make_data(path, args, train, rank, world, device):
    cls = ShardkitData if args.loader == "shardkit" else PytorchData
    return cls(path, args, train, rank, world, device)


def save_checkpoint(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint


def evaluate(model, data, device, mean, std):
    model.eval()
    correct = torch.zeros((), device=device)
    seen = torch.zeros((), device=device)
    with torch.no_grad():
        for images, labels in data.epoch(0):
            x = images.to(device, non_blocking=True).float().sub_(mean).div_(std)
            y = labels.to(device, non_blocking=True)
            correct += (model(x).argmax(1) == y).sum()
            seen += y.numel()
    t = torch.stack([correct, seen]).double()
    dist.all_reduce(t)
    model.train()
    return (t[0] / t[1]).item()


def main(argv=None):
    args = parse_args(argv)
    rank, world, local_rank, device = setup_distributed()
    torch.manual_seed(args.seed)
    cuda = device.type == "cuda"
    train = make_data(args.data, args, True, rank, world, device)
    val = make_data(args.val, args, False, rank, world, device) if args.val else None

    model = torchvision.models.__dict__[args.arch](num_classes=train.classes).to(device)
    memory_format = torch.channels_last if cuda else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    lr = args.lr * args.batch_size * world / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    steps_per_epoch = len(train)
    total_steps = args.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    amp_dtype = torch.bfloat16 if args.amp_dtype == "bf16" else torch.float16
    scaling = cuda and amp_dtype == torch.float16  # bf16 needs no loss scaling
    scaler = (torch.amp.GradScaler("cuda", enabled=scaling) if hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=scaling))
    criterion = nn.CrossEntropyLoss()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    start_epoch, step = 0, 0
    if args.resume:
        ckpt = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
        start_epoch, step = ckpt["epoch"], ckpt["step"]
        train.load_state_dict(ckpt["loader"][rank] if isinstance(ckpt["loader"], list) else ckpt["loader"])
        if rank == 0:
            print("resumed from %s: epoch %d, step %d" % (args.checkpoint, start_epoch, step), flush=True)

    images_done, wait_s, loop_s, loss_sum, loss_n = 0, 0.0, 0.0, torch.zeros((), device=device), 0
    # The last whole epoch's own figures, of an epoch after this process's
    # first (past start-up: cuDNN's autotuning, the loader's first fill): what
    # an epoch of a long run costs. None if no such epoch ran.
    last_epoch = None  # images, wait, seconds
    done = False
    for epoch in range(start_epoch, args.epochs):
        batches = train.epoch(epoch)
        batch_in_epoch = step - epoch * steps_per_epoch
        epoch_images, epoch_wait = images_done, wait_s
        t_loop = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            if cuda:
                torch.cuda.synchronize()  # the wait includes the copy the last step queued
            wait_s += time.perf_counter() - t0
            x = images.to(device, non_blocking=True).float().sub_(mean).div_(std)
            x = x.contiguous(memory_format=memory_format)
            y = labels.to(device, non_blocking=True)
            if cuda:
                with torch.autocast(device_type="cuda", dtype=amp_dtype):
                    loss = criterion(model(x), y)
            else:
                loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            batch_in_epoch += 1
            images_done += y.numel() * world
            loss_sum += loss.detach()
            loss_n += 1
            if args.log_steps and rank == 0:
                print("step %d loss %.6f" % (step, loss.item()), flush=True)
            if rank == 0 and step % args.print_every == 0:
                elapsed = loop_s + time.perf_counter() - t_loop
                print("epoch %d step %d/%d loss %.4f %.0f img/s data-wait %.1f%%" % (
                    epoch, step, total_steps, (loss_sum / loss_n).item(), images_done / elapsed,
                    100 * wait_s / elapsed), flush=True)
            save = args.checkpoint and (step % args.checkpoint_every == 0 or step == args.max_steps)
            if save:
                # Every rank's loader position (they are equal for shardkit,
                # whose ranks advance in lockstep).
                states = [None] * world
                dist.all_gather_object(states, train.state_dict(epoch, batch_in_epoch))
                if rank == 0:
                    save_checkpoint(args.checkpoint, {
                        "model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                        "epoch": epoch, "step": step, "loader": states, "args": vars(args)})
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        if cuda:
            torch.cuda.synchronize()  # the epoch's last steps, finished
        epoch_s = time.perf_counter() - t_loop
        loop_s += epoch_s
        if epoch > start_epoch and batch_in_epoch >= steps_per_epoch and epoch_s > 0:
            last_epoch = (images_done - epoch_images, wait_s - epoch_wait, epoch_s)
        if done:
            break
    summary = {"loader": args.loader, "arch": args.arch, "ranks": world, "steps": step,
               "images_per_s": images_done / loop_s if loop_s > 0 else 0.0,
               "data_wait_fraction": wait_s / loop_s if loop_s > 0 else 0.0,
               "last_epoch_images_per_s": last_epoch[0] / last_epoch[2] if last_epoch else None,
               "last_epoch_data_wait_fraction": last_epoch[1] / last_epoch[2] if last_epoch else None,
               "mean_loss": (loss_sum / max(1, loss_n)).item()}
    if val is not None:
        summary["val_top1"] = evaluate(model, val, device, mean, std)
    if rank == 0:
        line = json.dumps(summary)
        print(line, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    finish()


def finish():
    """Ends the process group and the process. Exits without tearing down the
    DDP model: with PyTorch 1.13's gloo, its destructor joins the process
    group's worker threads while holding the GIL, and a worker freeing a
    tensor that has a Python object waits for the GIL forever (seen at the
    end of runs with a collective just done)."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, RuntimeError) as e:  # bad data or paths: one line, exit 2
        print("%s: error: %s" % (os.path.basename(sys.argv[0]), str(e).splitlines()[0] if str(e) else
                                 type(e).__name__), file=sys.stderr)
        sys.exit(2)
