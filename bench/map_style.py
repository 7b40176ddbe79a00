#!/usr/bin/python3
"""Map-style access to a shard dataset, both sides in one run.

  map_style.py SHARDS IMAGES_IDX LABELS_IDX [--batch 256] [--workers 2] [--rounds 3]

SHARDS holds the records of the IDX files, as `shardkit-pack idx --images
IMAGES_IDX --labels LABELS_IDX SHARDS` packs them (zstd blocks); for
Fashion-MNIST the IDX files are in /usr/share/datasets/fashion-mnist. Run it
with the built binding on the path (PYTHONPATH=build/python). Each round,
alternating the sides:

  shardkit.Dataset[i] in order, then in a random order, over every record,
      each on a Dataset opened for the pass (so the pass decompresses every
      block once: its first touch is counted);
  torch DataLoader(shardkit.Dataset, sampler=DistributedSampler(ds),
      num_workers=W) against the same DataLoader over a TensorDataset of the
      same uint8 images and int64 labels (read from the IDX files), one epoch
      each (set_epoch per round; the workers are started for each epoch, as a
      script without persistent_workers starts them).

Prints every round, then the best and the median per side (records/s by
the wall clock), and for the DataLoaders the CPU time the epoch took in the
main process and its workers together (microseconds per record: steadier
than the wall clock on a shared machine).
"""
import argparse
import random
import resource
import statistics
import sys
import time

import numpy as np
import torch
from idx import read_idx
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import shardkit


def records_per_sec(fn, n):
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def in_order(path):
    ds = shardkit.Dataset(path)
    n = len(ds)
    return records_per_sec(lambda: [ds[i] for i in range(n)], n)


def at_random(path, seed):
    ds = shardkit.Dataset(path)
    order = list(range(len(ds)))
    random.Random(seed).shuffle(order)
    return records_per_sec(lambda: [ds[i] for i in order], len(order))


def cpu_seconds():
    """CPU time of this process and of its children that have ended (the
    workers of an epoch that is over)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


CPU_US = {}  # side -> microseconds of CPU per record, per round


def one_epoch(name, ds, batch, workers, epoch):
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    loader = DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=workers)
    n = 0
    c0, t0 = cpu_seconds(), time.perf_counter()
    for x, y in loader:
        n += len(y)
    secs = time.perf_counter() - t0
    del loader  # its workers end: their CPU time is counted
    CPU_US.setdefault(name, []).append((cpu_seconds() - c0) / n * 1e6)
    return n / secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("images")
    ap.add_argument("labels")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    images, labels = read_idx(args.images), read_idx(args.labels)
    sk_ds = shardkit.Dataset(args.shards)
    if len(sk_ds) != len(labels):
        sys.exit("map_style: %s holds %d records, %s %d" % (args.shards, len(sk_ds), args.labels, len(labels)))
    # The same records on both sides.
    first = sk_ds[0]
    assert np.array_equal(first[0].reshape(images[0].shape), images[0]) and first[1] == labels[0]
    tensor_ds = TensorDataset(torch.from_numpy(images.copy()).unsqueeze(1),
                              torch.from_numpy(labels.astype(np.int64)))
    sides = {
        "Dataset[i] in order": lambda r: in_order(args.shards),
        "Dataset[i] at random": lambda r: at_random(args.shards, r),
        "DataLoader(shardkit.Dataset)": lambda r: one_epoch("shardkit", sk_ds, args.batch, args.workers, r),
        "DataLoader(TensorDataset)": lambda r: one_epoch("tensor", tensor_ds, args.batch, args.workers, r),
    }
    rates = {k: [] for k in sides}
    names = list(sides)
    print("map_style %s: %d records, batch %d, %d DataLoader workers, DistributedSampler, %d rounds"
          % (args.shards, len(sk_ds), args.batch, args.workers, args.rounds))
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        for name in order:
            rates[name].append(sides[name](r))
        print("round %d: " % (r + 1) + ", ".join("%s %.0f" % (k, rates[k][-1]) for k in names))
        sys.stdout.flush()
    print("| access | best records/s | median records/s |")
    print("|---|---:|---:|")
    for k in names:
        print("| %s | %.0f | %.0f |" % (k, max(rates[k]), statistics.median(rates[k])))
    a, b = rates["DataLoader(shardkit.Dataset)"], rates["DataLoader(TensorDataset)"]
    print("DataLoader shardkit / TensorDataset: %.2f best, %.2f median of rounds (wall clock)"
          % (max(a) / max(b), statistics.median([x / y for x, y in zip(a, b)])))
    ca, cb = CPU_US["shardkit"], CPU_US["tensor"]
    print("CPU per record, main process and workers: shardkit %s us, TensorDataset %s us; "
          "TensorDataset / shardkit %.2f (median of rounds)"
          % (", ".join("%.2f" % v for v in ca), ", ".join("%.2f" % v for v in cb),
             statistics.median([y / x for x, y in zip(ca, cb)])))


if __name__ == "__main__":
    main()
