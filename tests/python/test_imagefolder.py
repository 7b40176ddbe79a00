"""shardkit-pack imagenet against torchvision's ImageFolder, differentially.

On trees that exercise the root rule (one class with sub-folders, images and
READMEs beside the class folders, wrappers of one and of three levels), the
dataset packed from the folder, and from tars and zips of it, has the classes,
keys and labels ImageFolder finds on the folder named (an archive: on its
extraction), except in the one case docs/ingest.md names: where ImageFolder
would make a single class whose images all lie in its sub-folders, with no
image beside it (a wrapper, to the root rule), the pack has ImageFolder's
dataset on the folder the rule descends to, and with --root . ImageFolder's
on the folder named. An image that is in no class is named and fails
--strict; other files beside the classes do not.

ImageFolder counts a file as an image by its extension, shardkit by its
content: every image here has an image extension and every other file has
none, so that both count the same files. Runs with Debian's /usr/bin/python3
(torchvision, PIL); tools from SHARDKIT_BUILD."""
import io
import os
import shutil
import subprocess
import zipfile

import numpy as np
import pytest
from PIL import Image

from conftest import shardkit_module, tool

sk = shardkit_module()
datasets = pytest.importorskip("torchvision.datasets")
IMG_EXTENSIONS = datasets.folder.IMG_EXTENSIONS

# name: (files of the folder named, the root the rule takes for the folder,
# the root it takes for an archive holding the folder itself ("data/...")).
TREES = {
    "one class with sub-folders": (["n01/a.JPEG", "n01/2019/b.JPEG", "n01/2019/c.png"], "", "data"),
    "images beside the class folders": (
        ["n01/x.jpg", "n02/y.png", "n02/deep/z.jpeg", "cover.jpg", "README.txt"], "", ""),
    "a wrapper": (["train/n01/a.JPEG", "train/n02/b.JPEG", "train/n02/c.png"], "train", "data/train"),
    "three wrappers": (["a/b/train/n01/a.JPEG", "a/b/train/n02/b.JPEG", "a/b/train/n03/sub/c.JPEG"],
                       "a/b/train", "data/a/b/train"),
    "a README beside a wrapper": (["README.txt", "train/n01/a.JPEG", "train/n02/b.JPEG"], "train",
                                  "data/train"),
    "a README beside the class folders": (["README.txt", "LOC_synset_mapping", "n01/a.JPEG",
                                           "n02/b.JPEG", "n02/sub/c.JPEG"], "", "data"),
    "an image beside a wrapper": (["cover.jpg", "train/n01/a.JPEG", "train/n02/b.JPEG"], "", ""),
    "one class, images only in sub-folders": (["n01/2019/a.JPEG", "n01/2020/b.JPEG"], "n01",
                                              "data/n01"),
}


def pack(src, out, *args):
    r = subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(src), str(out),
                        *map(str, args)], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def is_image(name):
    return name.lower().endswith(IMG_EXTENSIONS)


def write_tree(top, files, seed):
    rnd = np.random.default_rng(seed)
    for i, rel in enumerate(files):
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if is_image(rel):
            buf = io.BytesIO()
            pixels = rnd.integers(0, 256, (24 + i, 20, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(buf, format="PNG" if rel.endswith(".png") else "JPEG")
            path.write_bytes(buf.getvalue())
        else:
            path.write_text("not an image: %s\n" % rel)


def imagefolder(root):
    """ImageFolder's classes and {key: class} on `root` (keys: paths below it)."""
    ds = datasets.ImageFolder(str(root))
    return ds.classes, {os.path.relpath(path, root): ds.classes[label] for path, label in ds.samples}


def packed(out):
    ds = sk.Dataset(str(out))
    return ds.classes, {ds.key(i): ds.classes[ds[i][1]] for i in range(len(ds))}


def a_wrapper_to_imagefolder(folder):
    """The documented exception, in ImageFolder's terms: ImageFolder makes one
    class of `folder`, no image lies directly in that class's folder, and none
    beside it."""
    classes, _ = imagefolder(folder)
    direct = lambda d: [n for n in os.listdir(d) if os.path.isfile(d / n) and is_image(n)]
    return len(classes) == 1 and not direct(folder) and not direct(folder / classes[0])


def check_descents(base, root):
    """The rule descends from `base` to `root` only through wrappers."""
    here = base
    for part in [p for p in root.split("/") if p]:
        assert a_wrapper_to_imagefolder(here), (here, root)
        here = here / part
    assert not a_wrapper_to_imagefolder(here), (here, root)


def archives(top, work):
    """(archive, the folder its extraction is, the root the rule takes) for
    tars and zips of the folder's contents and of the folder itself."""
    data = top / "data"
    out = []
    subprocess.run(["tar", "-C", str(data), "-cf", str(work / "contents.tar"), "."], check=True)
    subprocess.run("zip -qr %s ." % (work / "contents.zip"), cwd=data, shell=True, check=True)
    subprocess.run(["bsdtar", "-C", str(top), "-cf", str(work / "folder.tar"), "data"], check=True)
    with zipfile.ZipFile(work / "folder.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, _, names in os.walk(data):
            for n in sorted(names):
                z.write(os.path.join(dirpath, n), os.path.relpath(os.path.join(dirpath, n), top))
    return [("contents.tar", data), ("contents.zip", data), ("folder.tar", top), ("folder.zip", top)]


@pytest.mark.parametrize("case", sorted(TREES))
def test_packs_as_imagefolder_finds(case, tmp_path):
    files, root, wrapped_root = TREES[case]
    top = tmp_path / "top"
    write_tree(top / "data", files, seed=sorted(TREES).index(case))
    work = tmp_path / "work"
    work.mkdir()
    sources = [("folder", top / "data", top / "data", root)]
    for name, base in archives(top, work):
        sources.append((name, work / name, base, root if base == top / "data" else wrapped_root))
    for form, src, base, want_root in sources:
        check_descents(base, want_root)
        want = imagefolder(base / want_root)
        out = work / (form + ".ds")
        code, log = pack(src, out)
        assert code == 0, (case, form, log)
        assert packed(out) == want, (case, form, log)
        # An image in no class is named, and fatal under --strict; so is a
        # file in a class that is no image (which ImageFolder passes over);
        # other files beside the classes, or outside the root, are not.
        lost, unusable = [], []
        for f in files:
            rel = os.path.relpath(top / "data" / f, base / want_root)
            if rel.startswith(".."):
                continue
            if "/" not in rel and is_image(f):
                lost.append(f)
                assert os.path.basename(f) + ": an image beside the class folders" in log, (case, form, log)
            elif "/" in rel and not is_image(f):
                unusable.append(f)
        if len(want[0]) == 1 and os.path.isdir(base / want_root / want[0][0]) and any(
                (base / want_root / want[0][0] / n).is_dir() for n in os.listdir(base / want_root / want[0][0])):
            assert "one class, " + want[0][0] in log and "--root" in log, (case, form, log)
        strict = work / (form + ".strict")
        code, log = pack(src, strict, "--strict")
        assert (code == 0) == (not lost and not unusable), (case, form, lost, unusable, log)
        if lost or unusable:
            assert "--strict" in log and not strict.exists(), log
        # --root . takes the folder named as the root, as ImageFolder does.
        if want_root:
            code, log = pack(src, work / (form + ".dot"), "--root", ".")
            assert code == 0, (case, form, log)
            assert packed(work / (form + ".dot")) == imagefolder(base), (case, form)


def test_the_issues_tree_is_one_class_of_both_images(tmp_path):
    """train/n01/a.JPEG and train/n01/2019/b.JPEG: one class, n01, holding
    both (the wrapper rule once took n01 for the root and dropped a.JPEG)."""
    write_tree(tmp_path / "train", ["n01/a.JPEG", "n01/2019/b.JPEG"], seed=43)
    code, log = pack(tmp_path / "train", tmp_path / "ds", "--strict")
    assert code == 0, log
    assert packed(tmp_path / "ds") == (["n01"], {"n01/a.JPEG": "n01", "n01/2019/b.JPEG": "n01"})
    assert packed(tmp_path / "ds") == imagefolder(tmp_path / "train")
    shutil.rmtree(tmp_path / "ds")
