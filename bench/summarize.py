#!/usr/bin/python3
"""Turns the files bench/compare_pytorch.sh wrote into the markdown table of ratios."""
import json
import os
import platform
import subprocess
import sys

out, files, nbytes, t0, t1, t2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:7])


def load(name):
    with open(os.path.join(out, name)) as f:
        text = f.read().strip()
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines()]
    return json.loads(text)


def by_workers(rows):
    return {r["workers"]: r["images_per_sec"] for r in rows}


cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                     text=True).stdout.strip()
print(f"Measured on {cpu}, {os.cpu_count()} cores, {platform.system()} (bench/compare_pytorch.sh).\n")

cat_s, pack_s = t1 - t0, t2 - t1
print("**Packing** %d JPEGs (%.1f MB):\n" % (files, nbytes / 1e6))
print("| | seconds | files/s | MB/s |")
print("|---|---:|---:|---:|")
print("| `cat` of the tree (warm cache) | %.2f | %.0f | %.0f |" % (cat_s, files / cat_s, nbytes / cat_s / 1e6))
print("| `shardkit-pack imagenet` (validating decode, all cores) | %.2f | %.0f | %.0f |" %
      (pack_s, files / pack_s, nbytes / pack_s / 1e6))
print("| ratio pack / cat | %.2f | | |\n" % (cat_s / pack_s))

jref = load("jpeg-reference.json")["records_per_sec"]
sk, pt = by_workers(load("jpeg-shardkit.json")), by_workers(load("jpeg-pytorch.jsonl"))
print("**JPEG, train transform** (RandomResizedCrop 224 + flip, uint8 out), images/s:\n")
print("| workers | shardkit | PyTorch DataLoader + ImageFolder | shardkit / PyTorch | shardkit / full-size decode (1 core) |")
print("|---:|---:|---:|---:|---:|")
for w in sorted(sk):
    print("| %d | %.0f | %.0f | %.2fx | %.2fx |" % (w, sk[w], pt.get(w, float("nan")), sk[w] / pt.get(w, float("nan")),
                                                  sk[w] / w / jref))
w0 = min(sk)
for w in sorted(sk)[1:]:
    print("\nshardkit efficiency %d -> %d workers: %.0f%%" % (w0, w, 100 * sk[w] / sk[w0] * w0 / w), end="")
print("\n\nfull-size libjpeg-turbo decode, 1 core, from memory: %.0f images/s\n" % jref)

zref = load("raw-reference.json")["records_per_sec"]
sk, skc, pt = (by_workers(load("raw-shardkit.json")), by_workers(load("raw-shardkit-cached.json")),
               by_workers(load("raw-pytorch.jsonl")))
print("**Fashion-MNIST, raw 28x28 uint8**, images/s:\n")
print("| workers | shardkit streamed (block-local, zstd each epoch) | shardkit cached (full shuffle) | "
      "PyTorch DataLoader + TensorDataset | streamed / PyTorch | streamed per core / zstd alone |")
print("|---:|---:|---:|---:|---:|---:|")
for w in sorted(sk):
    print("| %d | %.0f | %.0f | %.0f | %.1fx | %.0f%% |" % (w, sk[w], skc.get(w, float("nan")), pt.get(w, float("nan")),
                                                          sk[w] / pt.get(w, float("nan")), 100 * sk[w] / w / zref))
for w in sorted(sk)[1:]:
    print("\nshardkit streamed efficiency %d -> %d workers: %.0f%%" % (w0, w, 100 * sk[w] / sk[w0] * w0 / w), end="")
print("\n\nzstd alone, 1 core, from memory: %.0f records/s" % zref)
