#!/usr/bin/python3
"""The peer baseline: PyTorch's DataLoader, measured the way shardkit-bench measures.

  pytorch_loader.py imagefolder DIR  --workers 1,2 --batch 32 --batches N
      torchvision ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor
  pytorch_loader.py tensor IMAGES_IDX_GZ LABELS_IDX_GZ --workers 1,2 --batch 256 --batches N
      a TensorDataset of the uint8 images (the fastest plain-PyTorch way)
  pytorch_loader.py s3objects s3://BUCKET/PREFIX --workers 1,2 --batch 32 --batches N
      one object per JPEG (PREFIX/CLASS/NAME.jpg), each fetched with boto3's get_object in
      the DataLoader's workers (a client per worker; AWS_ENDPOINT_URL and the keys from the
      environment), then the imagefolder transform; always cold

  --cold (imagefolder): evict the files before each round, start fresh workers, no warm-up.

Prints one JSON object per worker count: {"workers", "images_per_sec", ...}.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from idx import read_idx
from torch.utils.data import DataLoader, TensorDataset


def measure(loader, warmup, batches, repeat):
    """Best of `repeat` timed rounds of `batches` batches, after the warm-up
    (the way shardkit-bench times its loader and its references)."""
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    best = None
    for _ in range(max(1, repeat)):
        n = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            try:
                x, _ = next(it)
            except StopIteration:
                it = iter(loader)
                x, _ = next(it)
            n += x.shape[0]
        secs = time.perf_counter() - t0
        if best is None or n / secs > best[0] / best[1]:
            best = (n, secs)
    return best


def evict(paths):
    """Drops the files from the page cache (as shardkit-bench --cold does)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def measure_cold(make_loader, batches, repeat, paths):
    """Best of `repeat` rounds, each after evicting every file and starting
    fresh workers: no warm-up, so every image comes from storage."""
    best = None
    for _ in range(max(1, repeat)):
        evict(paths)
        n = 0
        t0 = time.perf_counter()
        it = iter(make_loader())
        for _ in range(batches):
            x, _ = next(it)
            n += x.shape[0]
        secs = time.perf_counter() - t0
        del it
        if best is None or n / secs > best[0] / best[1]:
            best = (n, secs)
    return best


def s3_client():
    """boto3's S3 client for AWS_ENDPOINT_URL (Debian's boto3 1.26 does not read
    that variable itself), path-style as radosgw wants."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
                        config=Config(s3={"addressing_style": "path"}))


class S3Objects(torch.utils.data.Dataset):
    """ImageFolder over object storage, the way people write it: the keys
    listed once, each image a get_object in the worker that decodes it."""

    def __init__(self, url, transform):
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self.bucket, self.transform, self.client = bucket, transform, None
        keys = []
        pages = s3_client().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
            keys += [o["Key"] for o in page.get("Contents", [])]
        classes = sorted({k.split("/")[-2] for k in keys})
        index = {c: i for i, c in enumerate(classes)}
        self.samples = [(k, index[k.split("/")[-2]]) for k in sorted(keys)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        import io

        from PIL import Image
        if self.client is None:  # one per worker process
            self.client = s3_client()
        key, label = self.samples[i]
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return self.transform(Image.open(io.BytesIO(body)).convert("RGB")), label


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["imagefolder", "tensor", "s3objects"])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="evict the image files before each round (imagefolder)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.mode in ("imagefolder", "s3objects"):
        import torchvision
        from torchvision import transforms
        tf = transforms.Compose([transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip(),
                                 transforms.PILToTensor()])
        if args.mode == "s3objects":
            ds = S3Objects(args.paths[0], tf)
            args.cold = True  # every round fetches its images anew
        else:
            ds = torchvision.datasets.ImageFolder(args.paths[0], transform=tf)
    else:
        x = torch.from_numpy(read_idx(args.paths[0]).copy()).unsqueeze(1)
        y = torch.from_numpy(read_idx(args.paths[1]).astype(np.int64))
        ds = TensorDataset(x, y)
    for w in [int(v) for v in args.workers.split(",")]:
        if args.cold:
            n, secs = measure_cold(lambda: DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=w,
                                                      drop_last=True),
                                   args.batches, args.repeat,
                                   [p for p, _ in ds.samples] if args.mode == "imagefolder" else [])
            print(json.dumps({"workers": w, "images_per_sec": n / secs, "images": n, "seconds": secs}))
            sys.stdout.flush()
            continue
        loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=w, persistent_workers=w > 0,
                            drop_last=True)
        n, secs = measure(loader, args.warmup, args.batches, args.repeat)
        print(json.dumps({"workers": w, "images_per_sec": n / secs, "images": n, "seconds": secs}))
        sys.stdout.flush()
        del loader


if __name__ == "__main__":
    main()
