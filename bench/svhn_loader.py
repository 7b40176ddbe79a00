#!/usr/bin/python3
"""The SVHN study's data path against shardkit's, per core, in one run:
torchvision.datasets.SVHN (scipy.io.loadmat of train_32x32.mat) + ToTensor +
DataLoader(batch 512, num_workers=0, shuffled as DistributedSampler shuffles)
against shardkit.Loader(batch 512, workers=1) on the same file packed with
`shardkit-pack svhn`, both yielding torchvision's float 0-1 batches (and
shardkit's uint8 batches, what a GPU script would copy and normalise there).

    bench/svhn_loader.py [FILE.mat] [--images 73257] [--batches 40] [--repeat 3] [--out DIR]

FILE.mat: an SVHN file (train_32x32.mat); without one, an SVHN-shaped file of
--images random images is made with scipy (the real train set: 73,257). One
intra-op thread for both sides. Samples/s are the best of --repeat rounds of
--batches batches after a warm-up; the open (loadmat / pack) is timed apart.
Writes OUT/svhn_loader.md and .csv.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("SHARDKIT_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))


def make_svhn(path, n):
    import numpy as np
    import scipy.io

    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = rng.integers(1, 11, (n, 1)).astype(np.float64)
    scipy.io.savemat(path, {"X": X, "y": y}, do_compression=True)


def rate(batches_iter, batches, warmup, repeat):
    """Best samples/s of `repeat` rounds of `batches` batches, after `warmup`."""
    for _ in range(warmup):
        next(batches_iter)
    best = 0.0
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        for _ in range(batches):
            n += next(batches_iter)[0].shape[0]
        best = max(best, n / (time.perf_counter() - t0))
    return best


def epochs(make_loader, set_epoch=None):
    """Batches of successive epochs, forever."""
    loader, epoch = make_loader(), 0
    while True:
        if set_epoch:
            set_epoch(loader, epoch)
        for batch in loader:
            yield batch
        epoch += 1


def study(folder, args):
    import torch
    import torchvision
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms

    svhn = type("SVHN", (torchvision.datasets.SVHN,), {"_check_integrity": lambda self: True})
    t0 = time.perf_counter()
    dataset = svhn(folder, split="train", transform=transforms.ToTensor())
    opened = time.perf_counter() - t0
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=0)

    def make():
        return DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)

    with torch.no_grad():
        ips = rate(epochs(make, lambda loader, e: sampler.set_epoch(e)), args.batches, args.warmup, args.repeat)
    return opened, ips


def port(shards, transform, args):
    import shardkit

    def make():
        return shardkit.Loader(shards, args.batch, transform=transform, workers=1, shuffle="full", rank=0,
                               world_size=1, seed=0)

    return rate(epochs(make), args.batches, args.warmup, args.repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mat", nargs="?")
    ap.add_argument("--images", type=int, default=73257)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "svhn_loader"))
    args = ap.parse_args()
    import torch
    from torchvision import transforms

    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    folder = os.path.join(args.out, "svhn")
    os.makedirs(folder, exist_ok=True)
    mat = os.path.join(folder, "train_32x32.mat")
    if args.mat:
        if os.path.lexists(mat):
            os.remove(mat)
        os.symlink(os.path.abspath(args.mat), mat)
    elif not os.path.exists(mat):
        make_svhn(mat, args.images)
    shards = os.path.join(args.out, "shards")
    t0 = time.perf_counter()
    subprocess.run([os.path.join(BUILD, "tools", "pack", "shardkit-pack"), "svhn", mat, shards, "--force"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    packed = time.perf_counter() - t0
    opened, theirs = study(folder, args)
    ours_float = port(shards, transforms.ToTensor(), args)
    ours_uint8 = port(shards, None, args)
    print("study's data path (SVHN + ToTensor + DataLoader, num_workers=0): %.0f samples/s (loadmat %.1f s)"
          % (theirs, opened))
    print("shardkit, 1 worker, ToTensor floats: %.0f samples/s (%.2fx); uint8: %.0f samples/s (%.2fx); "
          "shardkit-pack svhn %.1f s" % (ours_float, ours_float / theirs, ours_uint8, ours_uint8 / theirs, packed))
    with open(os.path.join(args.out, "svhn_loader.csv"), "w") as f:
        f.write("side,samples_per_sec,open_seconds\n")
        f.write("study_dataloader,%.1f,%.2f\nshardkit_float,%.1f,%.2f\nshardkit_uint8,%.1f,%.2f\n"
                % (theirs, opened, ours_float, packed, ours_uint8, packed))
    with open(os.path.join(args.out, "svhn_loader.md"), "w") as f:
        f.write("SVHN-shaped data (32x32x3), batch %d, one core a side, best of %d rounds of %d batches, `%s`\n\n"
                % (args.batch, args.repeat, args.batches, " ".join(sys.argv)))
        f.write("| data path | samples/s | vs the study's | open |\n|---|---:|---:|---|\n")
        f.write("| the study's: SVHN + ToTensor + DataLoader, num_workers=0 | %.0f | 1.00x | loadmat %.1f s |\n"
                % (theirs, opened))
        f.write("| shardkit.Loader, 1 worker, ToTensor (float 0-1) | %.0f | %.2fx | pack once %.1f s |\n"
                % (ours_float, ours_float / theirs, packed))
        f.write("| shardkit.Loader, 1 worker, uint8 | %.0f | %.2fx | |\n" % (ours_uint8, ours_uint8 / theirs))
    print(open(os.path.join(args.out, "svhn_loader.md")).read())


if __name__ == "__main__":
    main()
