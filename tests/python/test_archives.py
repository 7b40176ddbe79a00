"""shardkit-pack imagenet from archives, without extracting: a tar of class
tars (ILSVRC2012_img_train.tar's layout), a flat val tar with a CSV or the
official devkit (meta.mat + ground truth), a tar.gz and a zip of a tree; each
gives exactly the dataset of the extracted tree. Hostile archives are named
and counted or refused with exit 2, and leave no manifest; the folder walker
visits each directory once."""
import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from conftest import shardkit_module, tool

sk = shardkit_module()


def pack(src, out, *args):
    r = subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", str(src), str(out), *map(str, args)],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def same_dataset(a, b):
    x, y = sk.Dataset(str(a)), sk.Dataset(str(b))
    assert x.classes == y.classes
    assert len(x) == len(y)
    for i in range(len(x)):
        assert x.key(i) == y.key(i), i
        assert x[i] == y[i], x.key(i)


def jpeg(photo, w, h, mode="RGB", fmt="JPEG"):
    buf = io.BytesIO()
    photo.resize((w, h)).convert(mode).save(buf, format=fmt, quality=85)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tree(tmp_path_factory, photos):
    """A class-folder tree of real photographs with the cases packing handles:
    a CMYK JPEG, a PNG named .JPEG, a corrupt file, a sub-folder, a hidden file."""
    root = tmp_path_factory.mktemp("archives") / "train"
    for c in range(4):
        d = root / ("n0000000%d" % c)
        d.mkdir(parents=True)
        src = Image.open(photos[c]).convert("RGB")
        for k in range(5):
            (d / ("n0000000%d_%d.JPEG" % (c, k))).write_bytes(jpeg(src, 120 + 10 * k, 90 + 5 * c))
    photo = Image.open(photos[4]).convert("RGB")
    (root / "n00000001" / "cmyk.JPEG").write_bytes(jpeg(photo, 100, 80, "CMYK"))
    (root / "n00000002" / "png.JPEG").write_bytes(jpeg(photo, 100, 80, fmt="PNG"))
    (root / "n00000003" / "broken.JPEG").write_bytes(jpeg(photo, 100, 80)[:300])
    (root / "n00000003" / "sub").mkdir()
    (root / "n00000003" / "sub" / "deep.JPEG").write_bytes(jpeg(photo, 64, 64))
    (root / "n00000000" / ".hidden.JPEG").write_bytes(jpeg(photo, 64, 64))
    return root


def test_train_tar_of_class_tars_tar_gz_and_zip_give_the_trees_dataset(tree, tmp_path):
    code, out = pack(tree, tmp_path / "from_tree")
    assert code == 0, out
    # ILSVRC2012_img_train.tar: one tar per class, members without folders.
    with tarfile.open(tmp_path / "train.tar", "w") as outer:
        for cls in sorted(os.listdir(tree)):
            inner = tmp_path / (cls + ".tar")
            with tarfile.open(inner, "w") as t:
                for name in sorted(os.listdir(tree / cls)):
                    t.add(tree / cls / name, arcname=name)
            outer.add(inner, arcname=cls + ".tar")
    with tarfile.open(tmp_path / "train.tar.gz", "w:gz") as t:
        t.add(tree, arcname="train")
    with zipfile.ZipFile(tmp_path / "train.zip", "w") as z:
        for dirpath, _, names in os.walk(tree):
            for n in names:
                p = os.path.join(dirpath, n)
                z.write(p, arcname=os.path.join("imagenet", "train", os.path.relpath(p, tree)))
        z.writestr("imagenet/LOC_synset_mapping.txt", "n00000000 a\n")  # beside the tree
    for archive, extra in (("train.tar", []), ("train.tar.gz", []),
                           ("train.zip", ["--archive-root", "imagenet/train"])):
        code, out = pack(tmp_path / archive, tmp_path / (archive + ".ds"), *extra)
        assert code == 0, out
        assert "1 CMYK, 1 PNG" in out and "skipped: 1 bad images" in out, out
        same_dataset(tmp_path / "from_tree", tmp_path / (archive + ".ds"))
        assert not os.path.exists(tmp_path / (archive + ".ds") / ".shardkit-scratch")
        manifest = json.load(open(tmp_path / (archive + ".ds") / "manifest.json"))
        assert manifest["created_by"]["options"]["src"].endswith(archive)


def write_meta_mat(path, wnids, compress):
    """A devkit meta.mat in the devkit's structure, as scipy.io.savemat writes
    it: a struct array `synsets` (ILSVRC2012_ID, WNID, words, gloss,
    num_children, children, wordnet_height, num_train_images) whose
    ILSVRC2012_ID order is not the WNIDs' sorted order, the leaves first, then
    an inner synset whose children are the leaves (a leaf's are empty)."""
    scipy_io = pytest.importorskip("scipy.io")
    fields = ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images")
    synsets = np.zeros((len(wnids) + 1, 1), dtype=[(f, "O") for f in fields])
    for i, w in enumerate(wnids):
        synsets[i, 0] = (np.array([[i + 1]], dtype=np.uint8 if compress else np.float64), np.array([w]),
                         np.array(["words of " + w]), np.array(["a gloss, with 'quotes'"]), np.array([[0.0]]),
                         np.zeros((1, 0)), np.array([[0.0]]), np.array([[1300.0]]))
    n = len(wnids)
    synsets[n, 0] = (np.array([[n + 1]], dtype=np.float64), np.array(["n00000001"]), np.array(["entity"]),
                     np.array(["everything"]), np.array([[float(n)]]),
                     np.arange(1, n + 1, dtype=np.float64).reshape(1, n), np.array([[1.0]]), np.array([[0.0]]))
    scipy_io.savemat(path, {"synsets": synsets}, do_compression=compress)


def train_and_val(tree, tmp_path, photos, n):
    """The tree packed as train (its classes), and a flat val folder of n
    ILSVRC2012_val_*.JPEG images cut from one photograph."""
    code, out = pack(tree, tmp_path / "train")
    assert code == 0, out
    val = tmp_path / "val"
    val.mkdir()
    photo = Image.open(photos[5]).convert("RGB")
    for k in range(n):
        (val / ("ILSVRC2012_val_%08d.JPEG" % (k + 1))).write_bytes(jpeg(photo, 90 + k, 70))
    return sk.Dataset(str(tmp_path / "train")).classes, val


def test_val_tar_with_csv_or_devkit_gives_the_folders_labels(tree, tmp_path, photos):
    classes, val = train_and_val(tree, tmp_path, photos, 12)
    truth = [(k * 7) % 4 for k in range(12)]  # class index in `classes` per val image
    with open(tmp_path / "LOC_val_solution.csv", "w") as f:
        f.write("ImageId,PredictionString\n")
        for k, c in enumerate(truth):
            f.write("ILSVRC2012_val_%08d,%s 1 2 3 4\n" % (k + 1, classes[c]))
    with tarfile.open(tmp_path / "ILSVRC2012_img_val.tar", "w") as t:
        for name in sorted(os.listdir(val)):
            t.add(val / name, arcname=name)
    code, out = pack(val, tmp_path / "val_folder", "--val-labels", tmp_path / "LOC_val_solution.csv",
                     "--classes-from", tmp_path / "train")
    assert code == 0, out
    code, out = pack(tmp_path / "ILSVRC2012_img_val.tar", tmp_path / "val_tar", "--val-labels",
                     tmp_path / "LOC_val_solution.csv", "--classes-from", tmp_path / "train")
    assert code == 0, out
    same_dataset(tmp_path / "val_folder", tmp_path / "val_tar")
    # Labels for images the folder lacks: packed, and said (the first by name).
    (val / "ILSVRC2012_val_00000012.JPEG").rename(tmp_path / "moved.JPEG")
    code, out = pack(val, tmp_path / "val_short", "--val-labels", tmp_path / "LOC_val_solution.csv",
                     "--classes-from", tmp_path / "train")
    assert code == 0 and "1 of its 12 labelled images are not in the folder (the first: " \
        "ILSVRC2012_val_00000012)" in out, out
    (tmp_path / "moved.JPEG").rename(val / "ILSVRC2012_val_00000012.JPEG")
    # The devkit: ILSVRC ids in an order of their own, mapped by meta.mat.
    ilsvrc_order = [classes[i] for i in (2, 0, 3, 1)]
    for compress in (False, True):
        kit = tmp_path / ("devkit%d" % compress)
        (kit / "ILSVRC2012_devkit_t12" / "data").mkdir(parents=True)
        write_meta_mat(str(kit / "ILSVRC2012_devkit_t12" / "data" / "meta.mat"), ilsvrc_order, compress)
        with open(kit / "ILSVRC2012_devkit_t12" / "data" / "ILSVRC2012_validation_ground_truth.txt", "w") as f:
            for c in truth:
                f.write("%d\n" % (ilsvrc_order.index(classes[c]) + 1))
        archive = tmp_path / ("ILSVRC2012_devkit_t12_%d.tar.gz" % compress)
        with tarfile.open(archive, "w:gz") as t:
            t.add(kit / "ILSVRC2012_devkit_t12", arcname="ILSVRC2012_devkit_t12")
        code, out = pack(tmp_path / "ILSVRC2012_img_val.tar", tmp_path / ("val_devkit%d" % compress),
                         "--devkit", archive, "--classes-from", tmp_path / "train")
        assert code == 0, out
        same_dataset(tmp_path / "val_folder", tmp_path / ("val_devkit%d" % compress))
    # A meta.mat that is not one: refused by name, exit 2.
    bad = tmp_path / "bad_devkit.tar.gz"
    with tarfile.open(bad, "w:gz") as t:
        info = tarfile.TarInfo("ILSVRC2012_devkit_t12/data/meta.mat")
        data = b"MATLAB 5.0 MAT-file" + b"\0" * 107 + b"\x00\x01IM" + b"\x0e\0\0\0\xff\xff\xff\x7f"
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    code, out = pack(tmp_path / "ILSVRC2012_img_val.tar", tmp_path / "val_bad", "--devkit", bad)
    assert code == 2 and "meta.mat" in out, out
    assert not os.path.exists(tmp_path / "val_bad" / "manifest.json")



def test_a_devkit_is_read_as_tar_x_leaves_it_or_refused(tree, tmp_path, photos):
    """The devkit's files by path, as `tar -x` leaves them (a path given twice:
    its later member); ground-truth ids that wrap around a 32-bit int, a
    meta.mat that gives one id two WNIDs and two meta.mat at different paths
    are refused by name, never read as some other label."""
    classes, val = train_and_val(tree, tmp_path, photos, 2)
    meta = tmp_path / "meta.mat"
    write_meta_mat(str(meta), classes, False)  # ILSVRC2012_ID i + 1 is classes[i]
    meta_bytes = meta.read_bytes()
    dup = tmp_path / "dup.mat"
    write_meta_mat(str(dup), classes + [classes[0]], False)

    def kit(name, members):
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as t:
            for member, data in members:
                add_bytes(t, "ILSVRC2012_devkit_t12/" + member, data.encode() if isinstance(data, str) else data)
        return path

    gt = "data/ILSVRC2012_validation_ground_truth.txt"
    twice = kit("twice.tar.gz", [("data/meta.mat", meta_bytes), (gt, "1\n1\n"), (gt, "3\n2\n")])
    code, out = pack(val, tmp_path / "twice", "--devkit", twice, "--classes-from", tmp_path / "train")
    assert code == 0, out
    ds = sk.Dataset(str(tmp_path / "twice"))
    labels = {ds.key(i): ds[i][1] for i in range(len(ds))}
    assert labels == {"ILSVRC2012_val_00000001.JPEG": 2, "ILSVRC2012_val_00000002.JPEG": 1}, \
        "the later ground truth, as tar -x leaves it"
    cases = {
        "wrap": ([("data/meta.mat", meta_bytes), (gt, "4294967298\n1\n")], "is not an ILSVRC2012_ID"),
        "negwrap": ([("data/meta.mat", meta_bytes), (gt, "-4294967294\n1\n")], "is not an ILSVRC2012_ID"),
        "two_metas": ([("evaluation/data/meta.mat", meta_bytes), ("data/meta.mat", meta_bytes), (gt, "1\n2\n")],
                      "two members end in data/meta.mat"),
    }
    for name, (members, needle) in cases.items():
        archive = kit(name + ".tar.gz", members)
        code, out = pack(val, tmp_path / name, "--devkit", archive, "--classes-from", tmp_path / "train")
        assert code == 2 and needle in out and name + ".tar.gz" in out, (name, out)
        assert len(out.strip().splitlines()) <= 2, out
        assert not os.path.exists(tmp_path / name / "manifest.json")
    # A meta.mat whose extra synset (classes[0] again) takes id 2, classes[1]'s.
    scipy_io = pytest.importorskip("scipy.io")
    m = scipy_io.loadmat(str(dup), squeeze_me=False)["synsets"]
    m[len(classes), 0]["ILSVRC2012_ID"] = np.array([[2.0]])
    scipy_io.savemat(str(dup), {"synsets": m})
    archive = kit("dupid.tar.gz", [("data/meta.mat", dup.read_bytes()), (gt, "1\n2\n")])
    code, out = pack(val, tmp_path / "dupid", "--devkit", archive, "--classes-from", tmp_path / "train")
    assert code == 2 and "repeats ILSVRC2012_ID 2" in out, out


def add_bytes(t, name, data, **attrs):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in attrs.items():
        setattr(info, k, v)
    t.addfile(info, io.BytesIO(data))


def test_hostile_members_are_named_and_counted_and_nothing_leaves_out(tree, tmp_path, photos):
    photo = Image.open(photos[0]).convert("RGB")
    good = jpeg(photo, 80, 60)
    work = tmp_path / "work"
    work.mkdir()
    archive = work / "hostile.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        add_bytes(t, "train/n1/ok.JPEG", good)
        add_bytes(t, "train/n1/../../../evil.JPEG", good)
        add_bytes(t, "train/n2/../../evil2.JPEG", good)
        add_bytes(t, "train/n1/link.JPEG", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add_bytes(t, "train/n1/hard.JPEG", b"", type=tarfile.LNKTYPE, linkname="train/n1/ok.JPEG")
        add_bytes(t, "train/n1/dev", b"", type=tarfile.CHRTYPE)
        add_bytes(t, "train/n1/notes.txt", b"not an image")
        add_bytes(t, "train/n2/bomb.JPEG", b"\0" * (80 << 20))  # 80 MB of zeros, ~80 KB compressed
        add_bytes(t, "train/n2/ok.JPEG", good)
    code, out = pack(archive, work / "out")
    assert code == 0, out
    for name in ("evil.JPEG", "evil2.JPEG", "link.JPEG", "dev", "notes.txt", "bomb.JPEG"):
        assert name in out, (name, out)
    assert "1 bad images, 2 unsafe paths, 2 links or special files, 1 over the size limit" in out, out
    # A hard link to an earlier member is that member again, as tar -x makes it.
    ds = sk.Dataset(str(work / "out"))
    assert sorted(ds.key(i) for i in range(len(ds))) == ["n1/hard.JPEG", "n1/ok.JPEG", "n2/ok.JPEG"]
    assert sorted(os.listdir(work)) == ["hostile.tar.gz", "out"]
    assert sorted(os.listdir(tmp_path)) == ["work"]
    # A corrupt inner class tar: its class is named, the others packed.
    with tarfile.open(work / "train.tar", "w") as outer:
        inner = io.BytesIO()
        with tarfile.open(fileobj=inner, mode="w") as t:
            add_bytes(t, "a.JPEG", good)
        add_bytes(outer, "n1.tar", inner.getvalue())
        add_bytes(outer, "n2.tar", b"garbage" * 1000)
    code, out = pack(work / "train.tar", work / "out2")
    assert code == 0, out
    assert "n2.tar" in out and "1 unreadable class tars" in out, out
    # Truncated, empty, and not an archive at all: exit 2, no manifest.
    data = open(archive, "rb").read()
    (work / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    with tarfile.open(work / "empty.tar", "w"):
        pass
    (work / "text.zip").write_bytes(b"hello")
    # Not regular files: refused by name before they are opened, never a hang.
    os.mkfifo(work / "fifo.tar")
    for args in ((work / "fifo.tar", work / "fifo.out"), (tree, work / "fifo2.out", "--devkit", work / "fifo.tar"),
                 (tree, work / "dir.out", "--devkit", work)):
        r = subprocess.run([tool("tools", "pack", "shardkit-pack"), "imagenet", *map(str, args)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
    for name in ("cut.tar.gz", "empty.tar", "text.zip"):
        code, out = pack(work / name, work / (name + ".out"))
        assert code == 2, (name, out)
        assert name in out, out
        assert not os.path.exists(work / (name + ".out") / "manifest.json")
        assert not os.path.exists(work / (name + ".out") / ".shardkit-scratch")


def test_hostile_members_of_a_tar_of_class_tars_are_skipped_by_name(tree, tmp_path):
    """A symbolic link, a hard link, an absolute path and a README among the
    class tars of a train tar (made by GNU tar, bsdtar and Python): each is
    skipped by name and the class tars packed, as the same member inside a
    class tar is; --strict fails on the first and leaves nothing. So is an
    image or an archive outside the class tars (issue 62: no stray member
    refuses the whole tar, whatever it is)."""
    work = tmp_path / "work"
    work.mkdir()
    for cls in ("n00000000", "n00000001"):
        with tarfile.open(work / (cls + ".tar"), "w") as t:
            for name in sorted(os.listdir(tree / cls)):
                t.add(tree / cls / name, arcname=name)
    subprocess.run(["tar", "-cf", str(tmp_path / "clean.tar"), "n00000000.tar", "n00000001.tar"],
                   cwd=work, check=True)
    code, out = pack(tmp_path / "clean.tar", tmp_path / "clean")
    assert code == 0, out
    os.symlink("/etc/passwd", work / "evil.tar")
    os.link(work / "n00000000.tar", work / "n00000009.tar")
    (work / "README.txt").write_text("ILSVRC2012 train, one tar per class\n")
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0\n")
    members = ["n00000000.tar", "evil.tar", "n00000009.tar", "README.txt", str(secret), "n00000001.tar"]
    made = {"gnu.tar": ["tar", "-cPf"], "bsd.tar": ["bsdtar", "-cPf"]}
    for name, cmd in made.items():
        subprocess.run(cmd + [str(tmp_path / name)] + members, cwd=work, check=True, capture_output=True)
    with tarfile.open(tmp_path / "python.tar", "w") as t:
        t.add(work / "n00000000.tar", arcname="n00000000.tar")
        add_bytes(t, "evil.tar", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add_bytes(t, "n00000009.tar", b"", type=tarfile.LNKTYPE, linkname="n00000000.tar")
        add_bytes(t, "README.txt", b"ILSVRC2012 train\n")
        add_bytes(t, "/etc/passwd", b"root:x:0:0\n")
        add_bytes(t, "dev", b"", type=tarfile.CHRTYPE)
        t.add(work / "n00000001.tar", arcname="n00000001.tar")
    for name in ("gnu.tar", "bsd.tar", "python.tar"):
        listing = subprocess.run(["tar", "-tvf", str(tmp_path / name)], capture_output=True, text=True).stdout
        assert "evil.tar -> /etc/passwd" in listing and "link to n00000000.tar" in listing, listing
        code, out = pack(tmp_path / name, tmp_path / (name + ".ds"))
        assert code == 0, (name, out)
        for member in ("evil.tar: not a regular file (a symbolic link", "n00000009.tar: a hard link",
                       "README.txt: not a class tar", "passwd: not a class tar"):
            assert member in out and "(skipped)" in out, (name, member, out)
        same_dataset(tmp_path / "clean", tmp_path / (name + ".ds"))
        code, out = pack(tmp_path / name, tmp_path / (name + ".strict"), "--strict")
        assert code == 2 and "--strict" in out and "evil.tar" in out, (name, out)
        assert not (tmp_path / (name + ".strict")).exists(), name
    # An image, or an archive, outside the class tars: skipped by name too.
    photo = Image.open(tree / "n00000000" / "n00000000_0.JPEG").convert("RGB")
    (work / "cover.JPEG").write_bytes(jpeg(photo, 50, 40))
    (work / "more").mkdir()
    shutil.copy(work / "n00000001.tar", work / "more" / "n00000002.tar")
    for name, stray in (("image.tar", "cover.JPEG: not a class tar"),
                        ("deeper.tar", "more/n00000002.tar: not a class tar")):
        subprocess.run(["tar", "-cf", str(tmp_path / name), "n00000000.tar", stray.split(":")[0],
                        "n00000001.tar"], cwd=work, check=True)
        code, out = pack(tmp_path / name, tmp_path / (name + ".ds"))
        assert code == 0 and stray in out and " 1 outside the layout" in out, (name, out)
        same_dataset(tmp_path / "clean", tmp_path / (name + ".ds"))
        code, out = pack(tmp_path / name, tmp_path / (name + ".strict"), "--strict")
        assert code == 2 and "--strict" in out and stray in out, (name, out)
        assert not (tmp_path / (name + ".strict")).exists(), name


def test_stray_outer_members_of_a_tar_of_class_tars_follow_the_unusable_member_rule(tree, tmp_path):
    """Issue 62: "../n03.tar", an absolute "/elsewhere/n04.tar", an absolute
    "/n05.tar", a folder and a file below it among the class tars. GNU tar
    refuses the "..", and writes the absolute names without their "/" (or,
    with -P, at the root): none is a class tar of ILSVRC's layout, so each is
    skipped by name and counted, never a refusal of the whole tar and never a
    class; --strict fails on the first. What is packed is exactly the tar of
    the valid class tars, and nothing is written outside OUT."""
    inner = {}
    for cls in ("n00000000", "n00000001", "n00000002"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name in sorted(os.listdir(tree / cls)):
                t.add(tree / cls / name, arcname=name)
        inner[cls] = buf.getvalue()
    with tarfile.open(tmp_path / "clean.tar", "w") as t:
        for cls in ("n00000000", "n00000001"):
            add_bytes(t, cls + ".tar", inner[cls])
    strays = ["../n03.tar", "/elsewhere/n04.tar", "/n05.tar", "more/", "more/n06.tar"]
    with tarfile.open(tmp_path / "hostile.tar", "w", format=tarfile.GNU_FORMAT) as t:
        add_bytes(t, "n00000000.tar", inner["n00000000"])
        for name in strays:
            if name.endswith("/"):
                add_bytes(t, name, b"", type=tarfile.DIRTYPE, mode=0o755)
            else:
                add_bytes(t, name, inner["n00000002"])
        add_bytes(t, "n00000001.tar", inner["n00000001"])
    assert tarfile.open(tmp_path / "hostile.tar").getnames()[1:3] == ["../n03.tar", "/elsewhere/n04.tar"]
    # GNU tar, for reference: ".." refused, absolute names written below the cwd.
    (tmp_path / "x").mkdir()
    r = subprocess.run(["tar", "-xf", str(tmp_path / "hostile.tar")], cwd=tmp_path / "x",
                       capture_output=True, text=True)
    assert r.returncode == 2 and "../n03.tar: Member name contains '..'" in r.stderr, r.stderr
    assert not (tmp_path / "n03.tar").exists() and (tmp_path / "x" / "elsewhere" / "n04.tar").exists()
    code, out = pack(tmp_path / "clean.tar", tmp_path / "clean")
    assert code == 0, out
    code, out = pack(tmp_path / "hostile.tar", tmp_path / "hostile")
    assert code == 0, out
    for stray in strays:
        assert "hostile.tar:%s: " % stray in out, (stray, out)
    assert "3 unsafe paths, 2 outside the layout" in out, out
    same_dataset(tmp_path / "clean", tmp_path / "hostile")
    assert sk.Dataset(str(tmp_path / "hostile")).classes == ["n00000000", "n00000001"]
    assert sorted(os.listdir(tmp_path)) == ["clean", "clean.tar", "hostile", "hostile.tar", "x"]
    code, out = pack(tmp_path / "hostile.tar", tmp_path / "strict", "--strict")
    assert code == 2 and "--strict" in out and "hostile.tar:../n03.tar" in out, out
    assert not (tmp_path / "strict").exists()


def test_the_folder_walker_visits_each_directory_once(tree, tmp_path):
    root = tmp_path / "loopy"
    shutil.copytree(tree, root)
    os.symlink("..", root / "n00000001" / "up")          # sub -> ..
    os.symlink(str(root), root / "n00000009")             # a class folder linking to the root
    code, out = pack(root, tmp_path / "ds", "--follow-links")
    assert code == 0, out
    assert "already visited" in out and "up" in out, out
    # Without --follow-links a folder's links are skipped by name, as an archive's are.
    code, out = pack(root, tmp_path / "nolinks")
    assert code == 0 and "up: a symbolic link, not followed" in out, out
    assert code == 0 and "n00000009: a symbolic link, not followed" in out, out
    code, out = pack(tree, tmp_path / "plain")
    assert code == 0, out
    a, b = sk.Dataset(str(tmp_path / "ds")), sk.Dataset(str(tmp_path / "plain"))
    assert len(a) == len(b), "no image packed twice"
    assert sorted(a.key(i) for i in range(len(a))) == sorted(b.key(i) for i in range(len(b)))
