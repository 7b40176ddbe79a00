#!/usr/bin/python3
"""Make an ImageNet-shaped JPEG tree from real photographs that Debian packages ship.

Each class is one source photograph (mate-backgrounds' nature set, scikit-image's
sample photos); its images are seeded random crops (20-100% of the area, aspect
3:4 to 4:3) resized so the long side is 500 (about ImageNet's typical 500x375)
and saved at JPEG quality 90: real photographic content, not noise.

usage: make_jpeg_set.py OUT [--per-class N] [--seed S] [--long-side 500] [--quality 90] [--sources DIR]

--sources DIR takes the photographs from DIR (*.jpg, *.png) instead: scripts/gpu_kit.sh
carries Debian's photographs that way to a machine without these packages.
"""
import argparse
import glob
import os
import random

from PIL import Image

SOURCES = sorted(glob.glob("/usr/share/backgrounds/mate/nature/*.jpg")) + [
    p for p in (
        "/usr/lib/python3/dist-packages/skimage/data/coffee.png",
        "/usr/lib/python3/dist-packages/skimage/data/astronaut.png",
        "/usr/lib/python3/dist-packages/skimage/data/chelsea.png",
        "/usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png",
        "/usr/lib/python3/dist-packages/skimage/data/rocket.jpg",
    ) if os.path.exists(p)
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--long-side", type=int, default=500)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--sources", help="a folder of photographs to use instead of the packages' ones")
    args = ap.parse_args()
    sources = SOURCES
    if args.sources:
        sources = sorted(glob.glob(os.path.join(args.sources, "*.jpg")) +
                         glob.glob(os.path.join(args.sources, "*.png")))
        if not sources:
            raise SystemExit("make_jpeg_set.py: no *.jpg or *.png in --sources %s" % args.sources)
    if not sources:
        raise SystemExit("no source photographs: apt-get install mate-backgrounds python3-skimage")
    rng = random.Random(args.seed)
    total = 0
    for ci, src in enumerate(sources):
        name = "n%08d" % ci
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        photo = Image.open(src).convert("RGB")
        W, H = photo.size
        for k in range(args.per_class):
            area = W * H * rng.uniform(0.2, 1.0)
            aspect = rng.uniform(3 / 4, 4 / 3)
            w = min(W, int(round((area * aspect) ** 0.5)))
            h = min(H, int(round((area / aspect) ** 0.5)))
            x, y = rng.randint(0, W - w), rng.randint(0, H - h)
            crop = photo.crop((x, y, x + w, y + h))
            s = args.long_side / max(w, h)
            crop = crop.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
            if rng.random() < 0.5:
                crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
            crop.save(os.path.join(args.out, name, "%s_%05d.JPEG" % (name, k)), quality=args.quality)
            total += 1
    print("wrote %d JPEGs in %d classes to %s" % (total, len(sources), args.out))


if __name__ == "__main__":
    main()
