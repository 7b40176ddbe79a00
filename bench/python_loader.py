#!/usr/bin/python3
"""shardkit from a Python loop, side by side in one run with the same loader
from C++ (shardkit-bench) and with PyTorch's DataLoader + ImageFolder: images/s
per worker count, the train transform (RandomResizedCrop 224 + flip, uint8).

    bench/python_loader.py TREE [--shards DIR] [--workers 1,2] [--batch 32]
                           [--batches 60] [--repeat 3] [--out DIR]

TREE: an ImageNet-style folder of JPEGs (scripts/make_jpeg_set.py makes one from
real photographs); --shards: its shards (packed here with shardkit-pack if
absent). Each side is timed the way shardkit-bench times: after a warm-up, the
best of --repeat rounds of --batches batches. Writes OUT/python_loader.md and
.csv. Targets: Python >= 0.95x of C++ (the binding adds nothing measurable),
and the same lead over DataLoader as the C++ figures.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("SHARDKIT_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))


def python_shardkit(shards, workers, batch, batches, warmup, repeat):
    import shardkit

    loader = shardkit.Loader(shards, batch, workers=workers, transform="train", size=224, rank=0,
                             world_size=1, shuffle="auto")
    epoch = [0]

    def stream():
        while True:
            loader.set_epoch(epoch[0])
            for images, labels in loader:
                yield images, labels
            epoch[0] += 1

    it = stream()
    for _ in range(warmup):
        next(it)
    best = 0.0
    for _ in range(repeat):
        n = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            images, _ = next(it)
            n += images.shape[0]
        best = max(best, n / (time.perf_counter() - t0))
    return best


def cpp_shardkit(shards, workers, batch, batches, warmup, repeat):
    out = subprocess.run([os.path.join(BUILD, "tools", "bench", "shardkit-bench"), "loader", shards,
                          "--workers", str(workers), "--batch", str(batch), "--batches", str(batches),
                          "--warmup", str(warmup), "--repeat", str(repeat), "--transform", "train",
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["images_per_sec"]


def pytorch(tree, workers, batch, batches, warmup, repeat):
    out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "pytorch_loader.py"), "imagefolder", tree,
                          "--workers", str(workers), "--batch", str(batch), "--batches", str(batches),
                          "--warmup", str(warmup), "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_sec"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree")
    ap.add_argument("--shards")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "python_loader"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shards = args.shards or os.path.join(args.out, "shards")
    if not os.path.exists(os.path.join(shards, "manifest.json")):
        subprocess.run([os.path.join(BUILD, "tools", "pack", "shardkit-pack"), "imagenet", args.tree, shards,
                        "--force"], check=True, stdout=subprocess.DEVNULL)
    rows = []
    for w in [int(v) for v in args.workers.split(",")]:
        common = (w, args.batch, args.batches, args.warmup, args.repeat)
        cpp = cpp_shardkit(shards, *common)
        py = python_shardkit(shards, *common)
        pt = pytorch(args.tree, *common)
        rows.append((w, py, cpp, pt))
        print("workers %d: shardkit from Python %.0f img/s, shardkit-bench (C++) %.0f, PyTorch DataLoader %.0f"
              " -> Python/C++ %.2fx, Python/PyTorch %.2fx, C++/PyTorch %.2fx" %
              (w, py, cpp, pt, py / cpp, py / pt, cpp / pt), flush=True)
    with open(os.path.join(args.out, "python_loader.csv"), "w") as f:
        f.write("workers,python_shardkit,cpp_shardkit,pytorch_dataloader\n")
        for r in rows:
            f.write("%d,%.1f,%.1f,%.1f\n" % r)
    with open(os.path.join(args.out, "python_loader.md"), "w") as f:
        f.write("JPEG train transform (224), batch %d, best of %d rounds of %d batches, `%s`\n\n" %
                (args.batch, args.repeat, args.batches, " ".join(sys.argv)))
        f.write("| workers | shardkit from Python | shardkit-bench (C++) | PyTorch DataLoader | Python / C++ |"
                " Python / PyTorch | C++ / PyTorch |\n|---|---|---|---|---|---|---|\n")
        for w, py, cpp, pt in rows:
            f.write("| %d | %.0f | %.0f | %.0f | %.2fx | **%.2fx** | %.2fx |\n" % (w, py, cpp, pt, py / cpp,
                                                                               py / pt, cpp / pt))
    print(open(os.path.join(args.out, "python_loader.md")).read())


if __name__ == "__main__":
    main()
