"""Shared fixtures for shardkit's Python tests: where the built tools are, and
real photographs (from Debian packages) to test on."""
import os
import sys

import pytest

BUILD = os.environ.get("SHARDKIT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))

# The photographs scripts/make_jpeg_set.py cuts its sets from.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from make_jpeg_set import SOURCES as PHOTOS  # noqa: E402


def tool(*parts):
    path = os.path.join(BUILD, *parts)
    if not os.path.exists(path):
        pytest.skip("not built: " + path)
    return path


def shardkit_module():
    """The built binding (build/python/shardkit), or skip the module's tests."""
    path = os.path.join(BUILD, "python")
    if not os.path.exists(os.path.join(path, "shardkit", "__init__.py")):
        pytest.skip("Python binding not built: " + path, allow_module_level=True)
    if path not in sys.path:
        sys.path.insert(0, path)
    import shardkit
    return shardkit


@pytest.fixture(scope="session")
def photos():
    if len(PHOTOS) < 5:
        pytest.skip("no real photographs: apt-get install mate-backgrounds python3-skimage")
    return PHOTOS
