"""What a new user meets from Python when a dataset is not where one is
expected: SVHN's .mat file or a class-folder tree given to Loader or Dataset
is answered with the shardkit-pack command that packs it; and a finished
dataset (the Writer's, or shardkit-pack's) holds no lock file."""
import os
import subprocess

import numpy as np
import pytest

from conftest import shardkit_module, tool

sk = shardkit_module()
pytest.importorskip("torch")


def opens(path):
    """Loader and Dataset, each given `path`."""
    return (lambda: sk.Loader(path, 4, transform=None, rank=0, world_size=1), lambda: sk.Dataset(path))


def test_a_mat_file_given_as_a_dataset_says_how_to_pack_it(tmp_path):
    scipy_io = pytest.importorskip("scipy.io")
    mat = str(tmp_path / "train_32x32.mat")
    scipy_io.savemat(mat, {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.ones((2, 1))})
    for open_it in opens(mat):
        with pytest.raises(ValueError, match="a file, not a dataset directory; pack it first: shardkit-pack svhn"):
            open_it()


def test_a_class_folder_tree_given_as_a_dataset_says_how_to_pack_it(tmp_path):
    from PIL import Image

    (tmp_path / "train" / "n01").mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(str(tmp_path / "train" / "n01" / "a.JPEG"))
    tree = str(tmp_path / "train")
    for open_it in opens(tree):
        with pytest.raises(OSError, match="images, not a shardkit dataset; pack it first: shardkit-pack "
                                          "imagenet %s OUT" % tree):
            open_it()


def test_a_finished_dataset_holds_no_lock_file(tmp_path):
    out = str(tmp_path / "writer")
    with sk.Writer(out, kind="raw_u8", shape=(2, 2, 1)) as w:
        w.add(bytes(4), 0)
    assert sorted(os.listdir(out)) == ["manifest.json", "shard-00000.sks"]
    from PIL import Image

    (tmp_path / "src" / "c0").mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(str(tmp_path / "src" / "c0" / "a.JPEG"))
    subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(tmp_path / "src"),
                    str(tmp_path / "packed")], check=True, capture_output=True)
    assert not any(name.startswith(".") for name in os.listdir(str(tmp_path / "packed")))
