"""Shared fixtures for shardkit's Python tests: where the built tools are, and
real photographs (from Debian packages) to test on."""
import glob
import os

import pytest

BUILD = os.environ.get("SHARDKIT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))

PHOTOS = sorted(glob.glob("/usr/share/backgrounds/mate/nature/*.jpg")) + [
    p for p in (
        "/usr/lib/python3/dist-packages/skimage/data/coffee.png",
        "/usr/lib/python3/dist-packages/skimage/data/astronaut.png",
        "/usr/lib/python3/dist-packages/skimage/data/chelsea.png",
        "/usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png",
        "/usr/lib/python3/dist-packages/skimage/data/rocket.jpg",
    ) if os.path.exists(p)
]


def tool(*parts):
    path = os.path.join(BUILD, *parts)
    if not os.path.exists(path):
        pytest.skip("not built: " + path)
    return path


@pytest.fixture(scope="session")
def photos():
    if len(PHOTOS) < 5:
        pytest.skip("no real photographs: apt-get install mate-backgrounds python3-skimage")
    return PHOTOS
