"""The ingest rule, differentially: for every archive GNU tar, unzip or bsdtar
can extract, `shardkit-pack imagenet ARCHIVE` gives exactly the dataset that
packing its extraction gives (classes, keys, labels, payload bytes, order),
or exits 2 with nothing left in OUT. The corpus is generated here with GNU
tar, zip, bsdtar and Python's tarfile/zipfile: odd-but-valid archives (pax
and GNU long names, ./ prefixes, UTF-8 and Latin-1 names, files beside the
class folders, stored and deflated zips, data descriptors, empty folders,
a member given twice) and corrupt ones (each checksum, truncations).
Also: val CSVs as people save them, --strict for archive members, errors
that say their cause, interrupts, a 100,000-member tar, WebDataset shards.

Runs with Debian's /usr/bin/python3 (numpy, PIL); tools from SHARDKIT_BUILD."""
import io
import os
import shutil
import signal
import subprocess
import tarfile
import time
import zipfile

import pytest
from PIL import Image

from conftest import shardkit_module, tool

sk = shardkit_module()


def pack_tool():
    return tool("tools", "pack", "shardkit-pack")


def run(*args, **kw):
    r = subprocess.run([pack_tool(), *map(str, args)], capture_output=True, timeout=600, **kw)
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


def contents(path):
    """Everything a dataset holds, in order."""
    d = sk.Dataset(str(path))
    return d.classes, [(d.key(i),) + tuple(d[i]) for i in range(len(d))]


def jpeg(photo, w, h):
    buf = io.BytesIO()
    photo.resize((w, h)).save(buf, format="JPEG", quality=80)
    return buf.getvalue()


LONG = "long_" + "x" * 140 + ".JPEG"  # over ustar's 100 bytes: pax or GNU long names


@pytest.fixture(scope="module")
def src(tmp_path_factory, photos):
    """train/ with files beside its class folders, a UTF-8 class name, a
    nested folder, a long name, an empty class folder and a hidden folder."""
    top = tmp_path_factory.mktemp("ingest") / "src"
    photo = Image.open(photos[0]).convert("RGB")
    files = {
        "train/README.txt": b"ImageNet, as Kaggle ships it\n",
        "train/LOC_synset_mapping.txt": b"n01 tench\nn02 goldfish\n",
        "train/n01/a.JPEG": jpeg(photo, 40, 30),
        "train/n01/b.JPEG": jpeg(photo, 30, 40),
        "train/n01/sub/c.JPEG": jpeg(photo, 33, 33),
        "train/classe_\u00e9/d.JPEG": jpeg(photo, 36, 28),
        "train/n02/" + LONG: jpeg(photo, 28, 36),
        "train/n02/e.JPEG": jpeg(photo, 20, 20),
        "train/.hidden/x.JPEG": jpeg(photo, 20, 20),
    }
    for name, data in files.items():
        p = top / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (top / "train" / "n03").mkdir()
    return top


def add_latin1(src_dir):
    """A file named in Latin-1 (not UTF-8), as an old tar carries it."""
    (src_dir / "train" / "n02").joinpath(os.fsdecode(b"caf\xe9.JPEG")).write_bytes(
        (src_dir / "train" / "n02" / "e.JPEG").read_bytes())


def make_archives(src, work):
    """(archive, extractor) for each way people make one."""
    t = src / "train"
    out = []

    def sh(cmd, cwd=src):
        subprocess.run(cmd, cwd=cwd, check=True, shell=True, capture_output=True)

    for name, cmd in [("gnu.tar", "tar --format=gnu -cf {a} train"),
                      ("pax.tar", "tar --format=pax -cf {a} train"),
                      ("gnu.tar.gz", "tar -czf {a} train"),
                      ("dotslash.tar", "tar -C train -cf {a} ."),
                      ("bsd.tar", "bsdtar -cf {a} train"),
                      ("bsd.tgz", "bsdtar -czf {a} train")]:
        a = work / name
        sh(cmd.format(a=a))
        out.append((a, "bsdtar" if name.startswith("bsd") else "tar"))
    for name, cmd in [("deflated.zip", "zip -qr {a} train"),
                      ("stored.zip", "zip -qr0 {a} train"),
                      ("streamed.zip", "zip -qr - train > {a}"),  # data descriptors
                      ("bsd.zip", "bsdtar --format zip -cf {a} train")]:
        a = work / name
        sh(cmd.format(a=a))
        out.append((a, "unzip"))
    a = work / "python.zip"
    with zipfile.ZipFile(a, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirs, names in os.walk(t):
            rel = os.path.relpath(dirpath, src)
            z.writestr(rel + "/", b"")
            for n in names:
                if n == os.fsdecode(b"caf\xe9.JPEG"):
                    continue  # zipfile writes UTF-8 or cp437 names only
                z.write(os.path.join(dirpath, n), os.path.join(rel, n))
    out.append((a, "unzip"))
    for fmt, name in ((tarfile.PAX_FORMAT, "python-pax.tar"), (tarfile.GNU_FORMAT, "python-gnu.tar")):
        a = work / name
        with tarfile.open(a, "w", format=fmt) as tf:
            tf.add(t, arcname="train")
        out.append((a, "tar"))
    return out


def extract(archive, how, dest):
    dest.mkdir()
    cmd = {"tar": ["tar", "-xf", str(archive), "-C", str(dest)],
           "bsdtar": ["bsdtar", "-xf", str(archive), "-C", str(dest)],
           "unzip": ["unzip", "-qo", str(archive), "-d", str(dest)]}[how]
    return subprocess.run(cmd, capture_output=True).returncode


def test_archives_pack_exactly_as_their_extraction(src, tmp_path):
    add_latin1(src)
    for archive, how in make_archives(src, tmp_path):
        name = archive.name
        ext = tmp_path / (name + ".x")
        assert extract(archive, how, ext) == 0, name
        code, out = run("imagenet", ext, tmp_path / (name + ".from-extraction"))
        assert code == 0, (name, out)
        code, out = run("imagenet", archive, tmp_path / (name + ".ds"))
        assert code == 0, (name, out)
        want, got = contents(tmp_path / (name + ".from-extraction")), contents(tmp_path / (name + ".ds"))
        if name == "bsd.zip":
            # bsdtar in the C locale flags the Latin-1 name as UTF-8, which it
            # is not: a name that cannot be decoded, skipped and named.
            assert "a name that cannot be decoded (skipped)" in out, out
            # One sample fewer: another seeded order of the same records.
            want = (want[0], sorted(r for r in want[1] if r[0] != "n02/" + os.fsdecode(b"caf\xe9.JPEG")))
            got = (got[0], sorted(got[1]))
        assert got == want, name
        classes, records = got
        assert classes == ["classe_\u00e9", "n01", "n02", "n03"], (name, classes)  # n03 is empty
        assert "beside the class folders" in out and "n03: an empty class folder" in out, out
        keys = [r[0] for r in records]
        assert "n02/" + LONG in keys and "n01/sub/c.JPEG" in keys, (name, keys)
        assert not any(".hidden" in k for k in keys)


def corrupt_variants(tmp_path, src):
    """(name, bytes) of damaged archives, each of which its tool refuses too."""
    subprocess.run(["tar", "-czf", str(tmp_path / "ok.tar.gz"), "train"], cwd=src, check=True)
    subprocess.run(["tar", "-cf", str(tmp_path / "ok.tar"), "train"], cwd=src, check=True)
    subprocess.run("zip -qr0 %s train" % (tmp_path / "ok.zip"), cwd=src, check=True, shell=True)
    gz, tar, zp = ((tmp_path / n).read_bytes() for n in ("ok.tar.gz", "ok.tar", "ok.zip"))

    def flip(data, at, bit=0x01):
        b = bytearray(data)
        b[at] ^= bit
        return bytes(b)

    out = [("crc.tar.gz", flip(gz, len(gz) - 8)),        # the gzip trailer's CRC-32
           ("isize.tar.gz", flip(gz, len(gz) - 2)),      # its length
           ("deflate.tar.gz", flip(gz, len(gz) // 2)),   # a bit inside the deflate stream
           ("garbage.tar.gz", gz + b"not gzip")]
    for frac in (0.1, 0.5, 0.9):
        out.append(("cut%d.tar.gz" % (frac * 100), gz[: int(len(gz) * frac)]))
    out.append(("cut-trailer.tar.gz", gz[:-4]))
    # A header whose checksum no longer matches: the second member's name.
    second = 512 * (1 + (int(tar[124:136].strip(b"\0 ") or b"0", 8) + 511) // 512)
    out.append(("header.tar", flip(tar, second + 3)))
    out.append(("first-header.tar", flip(tar, 3)))
    out.append(("cut.tar", tar[: tar.find(b"\xff\xd8\xff") + 100]))  # inside an image's data
    for tool_, ext in (("xz", "xz"), ("bzip2", "bz2"), ("zstd", "zst")):
        packed = subprocess.run([tool_, "-c"], input=tar + os.urandom(60000), capture_output=True,
                                check=True).stdout if tool_ == "zstd" else \
            subprocess.run([tool_, "-c"], input=tar, capture_output=True, check=True).stdout
        # The stream's last check, after tar's end-of-archive (zstd: a bit inside its data).
        out.append(("tail.tar." + ext, flip(packed, len(packed) - (9 if tool_ != "zstd" else 3000))))
    jpeg_at = zp.find(b"\xff\xd8\xff")  # a stored member's data: its CRC-32 no longer holds
    out.append(("crc.zip", flip(zp, jpeg_at + 200)))
    cd = zp.rfind(b"PK\x01\x02")
    out.append(("directory.zip", zp[:cd] + b"XX" + zp[cd + 2:]))
    out.append(("cut.zip", zp[: len(zp) - 30]))
    out += damaged_zip_directories(zp)
    return out


def zip_end(zp):
    """(offset of the end-of-central-directory record, entries, directory size, directory offset)."""
    import struct
    end = zp.rfind(b"PK\x05\x06")
    entries, size, offset = struct.unpack("<HII", zp[end + 10:end + 20])
    return end, entries, size, offset


def damaged_zip_directories(zp):
    """A zip whose local headers are intact and whose central directory or
    end record is not: each makes unzip -t fail, each must be named corrupt
    (not taken for a zip with fewer members, nor for a layout problem)."""
    import random
    import struct
    end, entries, size, offset = zip_end(zp)
    rnd = random.Random(43)

    def put(at, data, base=zp):
        return base[:at] + data + base[at + len(data):]

    first = zp.find(b"PK\x01\x02", offset + 4)  # the directory's second entry
    return [
        ("cd-zeros.zip", put(offset, bytes(size))),
        ("cd-garbage.zip", put(offset, bytes(rnd.randrange(256) for _ in range(size)))),
        ("cd-first-entry.zip", put(offset, bytes(first - offset))),
        ("cd-truncated.zip", zp[:offset + size // 2] + zp[end:]),
        ("eocd-count.zip", put(end + 8, struct.pack("<HH", entries + 3, entries + 3))),
        ("eocd-count-low.zip", put(end + 8, struct.pack("<HH", entries - 1, entries - 1))),
        ("eocd-offset.zip", put(end + 16, struct.pack("<I", offset + 7))),
        ("eocd-signature.zip", put(end, b"PK\x00\x00")),
        ("eocd-truncated.zip", zp[:end + 12]),
    ]


def test_corrupt_archives_fail_naming_them_and_leave_nothing(src, tmp_path):
    for name, data in corrupt_variants(tmp_path, src):
        a = tmp_path / name
        a.write_bytes(data)
        how = "unzip" if name.endswith(".zip") else "bsdtar" if ".zst" in name else "tar"
        assert extract(a, how, tmp_path / (name + ".x")) != 0, name + ": its tool extracts it"
        out_dir = tmp_path / (name + ".ds")
        code, out = run("imagenet", a, out_dir)
        assert code == 2, (name, out)
        assert name in out.splitlines()[0] if out.startswith("shardkit-pack") else name in out, (name, out)
        assert not out_dir.exists(), (name, os.listdir(out_dir))
    # Named causes.
    code, out = run("imagenet", tmp_path / "crc.tar.gz", tmp_path / "o1")
    assert "gzip" in out and "incorrect data check" in out, out
    code, out = run("imagenet", tmp_path / "directory.zip", tmp_path / "o2")
    assert "corrupt" in out and "zip" in out, out
    code, out = run("imagenet", tmp_path / "crc.zip", tmp_path / "o3")
    assert "CRC" in out, out
    # A damaged directory or end record is named as damage, never as a layout
    # problem ("no class folders") or a zip with fewer members.
    for name, _ in damaged_zip_directories((tmp_path / "ok.zip").read_bytes()):
        code, out = run("imagenet", tmp_path / name, tmp_path / (name + ".again"))
        assert code == 2 and "corrupt" in out and "zip" in out, (name, out)
        assert "class folders" not in out, (name, out)


def test_zip_end_records_as_writers_make_them(src, tmp_path):
    """Valid zips whose end differs from zip's own: a comment, and the zip64
    end record and locator (with the classic record's counts at 0xFFFF, as
    writers of 65,536 members and more leave them): each packs as its
    extraction does, the count in its zip64 record checked."""
    import struct
    subprocess.run("zip -qr %s train" % (tmp_path / "plain.zip"), cwd=src, check=True, shell=True)
    zp = (tmp_path / "plain.zip").read_bytes()
    end, entries, size, offset = zip_end(zp)
    shutil.copy(tmp_path / "plain.zip", tmp_path / "comment.zip")
    subprocess.run(["zip", "-qz", str(tmp_path / "comment.zip")], input=b"packed by hand\n", check=True)
    record = b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, entries, entries, size, offset)
    locator = b"PK\x06\x07" + struct.pack("<IQI", 0, end, 1)
    classic = zp[end:end + 8] + b"\xff\xff\xff\xff" + zp[end + 12:]
    (tmp_path / "zip64.zip").write_bytes(zp[:end] + record + locator + classic)
    wrong = record[:32] + struct.pack("<Q", entries + 1) + record[40:]
    (tmp_path / "zip64-count.zip").write_bytes(zp[:end] + wrong + locator + classic)
    for name in ("comment.zip", "zip64.zip"):
        assert extract(tmp_path / name, "unzip", tmp_path / (name + ".x")) == 0, name
        assert run("imagenet", tmp_path / (name + ".x"), tmp_path / (name + ".want"))[0] == 0
        code, out = run("imagenet", tmp_path / name, tmp_path / (name + ".ds"))
        assert code == 0, (name, out)
        assert contents(tmp_path / (name + ".ds")) == contents(tmp_path / (name + ".want")), name
    assert extract(tmp_path / "zip64-count.zip", "unzip", tmp_path / "zip64-count.x") != 0
    code, out = run("imagenet", tmp_path / "zip64-count.zip", tmp_path / "zip64-count.ds")
    assert code == 2 and "zip64-count.zip" in out and "orrupt" in out, out
    assert not (tmp_path / "zip64-count.ds").exists()




def zip64_offsets(zp):
    """The zip with each central directory entry's local header offset moved
    into a zip64 extra field (0xFFFFFFFF in its place), as writers of zips
    over 4 GiB store it; the end record updated to the longer directory."""
    import struct
    end, entries, size, offset = zip_end(zp)
    out, p = bytearray(), offset
    for _ in range(entries):
        fixed = bytearray(zp[p:p + 46])
        n, m, k = struct.unpack("<HHH", fixed[28:34])
        local = struct.unpack("<I", fixed[42:46])[0]
        fixed[6:8] = struct.pack("<H", 45)  # version needed; "made by" (its host) kept
        fixed[30:32] = struct.pack("<H", m + 12)
        fixed[42:46] = b"\xff\xff\xff\xff"
        name, extra, comment = zp[p + 46:p + 46 + n], zp[p + 46 + n:p + 46 + n + m], zp[p + 46 + n + m:p + 46 + n + m + k]
        out += fixed + name + struct.pack("<HHQ", 1, 8, local) + extra + comment
        p += 46 + n + m + k
    tail = bytearray(zp[end:])
    tail[12:16] = struct.pack("<I", len(out))
    return zp[:offset] + bytes(out) + bytes(tail)

def test_a_zip_member_whose_local_header_names_another_file_is_refused(src, tmp_path, photos):
    """unzip extracts a member by its central directory name (warning that
    the local header says otherwise), libarchive by the local one: a zip
    whose two names differ is refused naming both, never packed as another
    file or class. Zip64 local offsets (in the central directory's extra
    field, as zip -fz writes them) are followed to the same check."""
    data = jpeg(Image.open(photos[0]).convert("RGB"), 30, 20)
    with zipfile.ZipFile(tmp_path / "names.zip", "w") as z:
        for name in ("cat/0.jpg", "cat/1.jpg", "dog/2.jpg"):
            z.writestr(name, data)
    b = bytearray((tmp_path / "names.zip").read_bytes())
    assert b[30:39] == b"cat/0.jpg"  # the first local header's name
    b[30:39] = b"dog/9.jpg"
    (tmp_path / "renamed.zip").write_bytes(bytes(b))
    code, out = run("imagenet", tmp_path / "renamed.zip", tmp_path / "renamed.ds")
    assert code == 2, out
    assert "renamed.zip:cat/0.jpg" in out and "dog/9.jpg" in out and "local header" in out, out
    assert len(out.strip().splitlines()) <= 2, out
    assert not (tmp_path / "renamed.ds").exists()
    subprocess.run("zip -qr %s train" % (tmp_path / "plain.zip"), cwd=src, check=True, shell=True)
    (tmp_path / "z64.zip").write_bytes(zip64_offsets((tmp_path / "plain.zip").read_bytes()))
    assert extract(tmp_path / "z64.zip", "unzip", tmp_path / "z64.x") == 0
    assert run("imagenet", tmp_path / "z64.x", tmp_path / "z64.want")[0] == 0
    code, out = run("imagenet", tmp_path / "z64.zip", tmp_path / "z64.ds")
    assert code == 0, out
    assert contents(tmp_path / "z64.ds") == contents(tmp_path / "z64.want")


def test_a_zip_whose_directory_claims_gigabytes_is_refused_without_reading_them_whole(tmp_path):
    """A sparse 8 GiB zip whose zip64 end record claims a central directory of
    nearly all of it: refused as corrupt, in bounded memory (2 GiB of address
    space for the tool), not by allocating the claim."""
    import resource
    import struct
    size = 8 << 30
    tail = 56 + 20 + 22
    with open(tmp_path / "claims.zip", "wb") as f:
        f.write(b"PK\x03\x04" + b"\0" * 26)
        f.seek(size - tail)
        f.write(b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 1, 1, size - tail, 0))
        f.write(b"PK\x06\x07" + struct.pack("<IQI", 0, size - tail, 1))
        f.write(b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
    r = subprocess.run([pack_tool(), "imagenet", str(tmp_path / "claims.zip"), str(tmp_path / "out")],
                       capture_output=True, timeout=600, preexec_fn=limit)
    err = r.stderr.decode()
    assert r.returncode == 2 and "claims.zip" in err and "corrupt zip" in err, err
    assert not (tmp_path / "out").exists()

def tar_with(path, members, fmt=tarfile.GNU_FORMAT):
    with tarfile.open(path, "w", format=fmt) as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
                continue
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
                continue
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_a_member_given_twice_keeps_the_last_as_tar_does(src, tmp_path):
    a, b = (src / "train/n01/a.JPEG").read_bytes(), (src / "train/n01/b.JPEG").read_bytes()
    tar_with(tmp_path / "twice.tar", [("t/c1/x.JPEG", a, "file"), ("t/c2/y.JPEG", a, "file"),
                                      ("t/c1/x.JPEG", b, "file")])
    assert extract(tmp_path / "twice.tar", "tar", tmp_path / "x") == 0
    assert run("imagenet", tmp_path / "x", tmp_path / "want")[0] == 0
    code, out = run("imagenet", tmp_path / "twice.tar", tmp_path / "got")
    assert code == 0 and "t/c1/x.JPEG: given twice" in out, out
    assert contents(tmp_path / "got") == contents(tmp_path / "want")
    code, out = run("imagenet", "--strict", tmp_path / "twice.tar", tmp_path / "strict")
    assert code == 2 and "given twice" in out and not (tmp_path / "strict").exists(), out
    # The same class tar twice in a train tar: refused by name.
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as t:
        info = tarfile.TarInfo("x.JPEG")
        info.size = len(a)
        t.addfile(info, io.BytesIO(a))
    tar_with(tmp_path / "train.tar", [("n1.tar", inner.getvalue(), "file"),
                                      ("n1.tar", inner.getvalue(), "file")])
    code, out = run("imagenet", tmp_path / "train.tar", tmp_path / "classes")
    assert code == 2 and "a second tar for class n1" in out, out
    assert not (tmp_path / "classes").exists()


def test_strict_covers_every_unusable_member_and_leaves_nothing(src, tmp_path):
    good = (src / "train/n01/a.JPEG").read_bytes()
    cases = {
        "symlink": ("t/c1/l.JPEG", "/etc/passwd", "symlink"),
        "unsafe": ("t/c1/../../evil.JPEG", good, "file"),
        "bad-image": ("t/c1/notes.txt", b"not an image", "file"),
        "long-name": ("t/c1/" + "n" * 5000 + ".JPEG", good, "file"),
        "oversized": ("t/c1/big.JPEG", b"\0" * (65 << 20), "file"),
    }
    for case, member in cases.items():
        a = tmp_path / (case + ".tar")
        tar_with(a, [("t/c1/ok.JPEG", good, "file"), ("t/c2/ok.JPEG", good, "file"), member],
                 fmt=tarfile.PAX_FORMAT)
        code, out = run("imagenet", a, tmp_path / (case + ".ds"))
        assert code == 0 and "(skipped)" in out, (case, out)
        assert len(sk.Dataset(str(tmp_path / (case + ".ds")))) == 2, case
        out_dir = tmp_path / (case + ".strict")
        code, out = run("imagenet", "--strict", a, out_dir)
        assert code == 2 and "--strict" in out, (case, out)
        assert not out_dir.exists(), case
    # A strict failure into an existing dataset leaves that dataset whole.
    keep = tmp_path / "keep"
    assert run("imagenet", src / "train", keep)[0] == 0
    before = contents(keep)
    code, out = run("imagenet", "--strict", "--force", tmp_path / "symlink.tar", keep)
    assert code == 2, out
    assert contents(keep) == before
    assert sorted(os.listdir(keep)) == sorted(os.listdir(keep))  # readable
    assert not [n for n in os.listdir(keep) if n.endswith(".tmp") or "spill" in n]


def test_val_csv_as_people_save_it(src, tmp_path):
    val = tmp_path / "val"
    val.mkdir()
    data = (src / "train/n01/a.JPEG").read_bytes()
    for k in range(1, 4):
        (val / ("ILSVRC2012_val_%08d.JPEG" % k)).write_bytes(data)
    rows = ["ILSVRC2012_val_00000001,n01 1 2 3 4", "ILSVRC2012_val_00000002,n02 1 2 3 4",
            "ILSVRC2012_val_00000003,n01 5 6 7 8"]
    csv = tmp_path / "bom.csv"
    csv.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(["ImageId,PredictionString"] + rows).encode() + b"\r\n")
    code, out = run("imagenet", val, tmp_path / "v", "--val-labels", csv)
    assert code == 0, out
    classes, records = contents(tmp_path / "v")
    assert classes == ["n01", "n02"], classes
    assert sorted((k, l) for k, _, l in records) == [
        ("ILSVRC2012_val_00000001.JPEG", 0), ("ILSVRC2012_val_00000002.JPEG", 1),
        ("ILSVRC2012_val_00000003.JPEG", 0)]
    for name, extra in (("dup", rows[0]), ("conflict", "ILSVRC2012_val_00000001,n02 1 2 3 4")):
        bad = tmp_path / (name + ".csv")
        bad.write_text("\n".join(["ImageId,PredictionString"] + rows + [extra]) + "\n")
        code, out = run("imagenet", val, tmp_path / (name + ".ds"), "--val-labels", bad)
        assert code == 2 and "ILSVRC2012_val_00000001 is listed again" in out, out
        assert "line 2" in out and not (tmp_path / (name + ".ds")).exists(), out


def test_a_shard_pattern_too_large_and_one_malformed_are_told_apart(tmp_path):
    """Too many paths names the whole pattern; a malformed brace says so,
    whatever text the pattern holds (here " shards")."""
    code, out = run("webdataset", tmp_path / "x-{0..9}-{0..999999}.tar", tmp_path / "o")
    assert code == 2 and "x-{0..9}-{0..999999}.tar: more than 1000000 shards" in out, out
    code, out = run("webdataset", tmp_path / "x-{0,1}-{ shards.tar", tmp_path / "o")
    assert code == 2 and "a '{' without its '}'" in out and "more than" not in out, out


def test_errors_say_their_cause(tmp_path):
    code, out = run("imagenet", tmp_path / "missing.tar", tmp_path / "o")
    assert code == 2 and "missing.tar: No such file or directory" in out, out
    code, out = run("webdataset", tmp_path / "shard-{0..1}.tar", tmp_path / "o")
    assert code == 2 and "shard-0.tar" in out and "No such file" in out, out
    secret = tmp_path / "secret.tar"
    tar_with(secret, [("t/c/x.JPEG", b"x", "file")])
    secret.chmod(0)
    os.chmod(tmp_path, 0o777)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    r = subprocess.run(as_nobody + [pack_tool(), "imagenet", str(secret), str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Permission denied" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_an_interrupt_leaves_nothing_in_any_phase(src, tmp_path):
    """SIGINT while the archive is read, and while shards are written: exit
    130, OUT gone (it did not exist before), no spill or temporary anywhere."""
    data = (src / "train/n01/a.JPEG").read_bytes()
    members = [("t/c%d/%05d.JPEG" % (i % 10, i), data, "file") for i in range(6000)]
    tar_with(tmp_path / "big.tar", members)
    for phase, marker in (("read", ".shardkit.lock"), ("write", ".shard-00002.sks.tmp")):
        out_dir = tmp_path / ("int-" + phase)
        p = subprocess.Popen([pack_tool(), "imagenet", str(tmp_path / "big.tar"), str(out_dir),
                              "--shard-size", "4096", "--threads", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        while not (out_dir / marker).exists():  # the state we want, not a time
            assert p.poll() is None, p.stdout.read()
        p.send_signal(signal.SIGSTOP)
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGCONT)
        out = p.communicate(timeout=600)[0].decode()
        assert p.returncode == 130, (phase, out)
        assert "interrupted" in out, out
        assert not out_dir.exists(), (phase, os.listdir(out_dir))
    assert sorted(os.listdir(tmp_path)) == ["big.tar"]


def test_a_tar_of_100000_small_images(tmp_path):
    """No per-member cost that grows with the member count (was: >120 s)."""
    photo = Image.new("RGB", (8, 8), (120, 30, 200))
    data = jpeg(photo, 8, 8)
    with tarfile.open(tmp_path / "many.tar", "w") as t:
        for i in range(100000):
            info = tarfile.TarInfo("train/c%03d/%06d.JPEG" % (i % 100, i))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    start = time.monotonic()
    code, out = run("imagenet", tmp_path / "many.tar", tmp_path / "ds")
    assert code == 0, out
    assert "packed 100000 of 100000 records (100 classes)" in out, out
    print("100,000-member tar packed in %.1f s" % (time.monotonic() - start))


def write_wds(path, samples):
    with tarfile.open(path, "w") as t:
        for key, parts in samples:
            for ext, data in parts.items():
                info = tarfile.TarInfo(key + "." + ext)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


def test_webdataset_shards(src, tmp_path):
    images = [p.read_bytes() for p in sorted((src / "train").rglob("*.JPEG"))]
    want = {}
    for s in range(4):
        samples = []
        for i in range(5):
            key = "sample%02d%02d" % (s, i)
            img = images[(s * 5 + i) % len(images)]
            samples.append((key, {"jpg": img, "cls": str((s + i) % 3).encode(), "json": b"{}"}))
            want[key] = (img, (s + i) % 3)
        write_wds(tmp_path / ("shards-%06d.tar" % s), samples)
    code, out = run("webdataset", str(tmp_path / "shards-{000000..000003}.tar"), tmp_path / "ds",
                    "--class-names", "cat,dog,eel")
    assert code == 0, out
    classes, records = contents(tmp_path / "ds")
    assert classes == ["cat", "dog", "eel"]
    assert {k: (p, l) for k, p, l in records} == want
    # The same shards as one gzipped tar each pack the same records.
    for s in range(4):
        with open(tmp_path / ("shards-%06d.tar" % s), "rb") as f, \
                open(tmp_path / ("gz-%06d.tar.gz" % s), "wb") as g:
            subprocess.run(["gzip", "-c"], stdin=f, stdout=g, check=True)
    code, out = run("webdataset", str(tmp_path / "gz-{000000..000003}.tar.gz"), tmp_path / "gz",
                    "--class-names", "cat,dog,eel")
    assert code == 0 and contents(tmp_path / "gz") == contents(tmp_path / "ds"), out
    # A sample without its class: skipped by name, or fatal under --strict.
    write_wds(tmp_path / "nolabel.tar", [("a", {"jpg": images[0], "cls": b"1"}), ("b", {"jpg": images[1]})])
    code, out = run("webdataset", tmp_path / "nolabel.tar", tmp_path / "nl")
    assert code == 0 and "nolabel.tar:b: no .cls" in out, out
    code, out = run("webdataset", "--strict", tmp_path / "nolabel.tar", tmp_path / "nls")
    assert code == 2 and not (tmp_path / "nls").exists(), out
    # Two images (or two class numbers) for one key: neither packed, the key
    # and both members named; a failure under --strict. Made by GNU tar from
    # files, as a shard writer on disk makes it.
    two = tmp_path / "two"
    two.mkdir()
    members = {"a.jpg": images[0], "a.cls": b"0", "b.jpg": images[1], "b.png": images[2],
               "b.cls": b"1", "c.JPG": images[3], "c.jpg": images[4], "c.cls": b"2",
               "d.jpg": images[5], "d.cls": b"1", "d.CLS": b"2"}
    for name, data in members.items():
        (two / name).write_bytes(data)
    subprocess.run(["tar", "-cf", str(tmp_path / "two.tar")] + sorted(members), cwd=two, check=True)
    code, out = run("webdataset", tmp_path / "two.tar", tmp_path / "two.ds", "--class-names", "x,y,z")
    assert code == 0, out
    assert "two.tar:b: two images for one key (b.jpg, b.png)" in out, out
    assert "two.tar:c: two images for one key (c.JPG, c.jpg)" in out, out
    assert "two.tar:d: two class numbers for one key (d.CLS, d.cls)" in out, out
    assert "skipped: 3 duplicates" in out, out
    assert [k for k, _, _ in contents(tmp_path / "two.ds")[1]] == ["a"]
    code, out = run("webdataset", "--strict", tmp_path / "two.tar", tmp_path / "two.strict")
    assert code == 2 and "two images for one key" in out and not (tmp_path / "two.strict").exists(), out
    # A member given twice in a shard (WebDataset: "duplicate file name"):
    # the key is not packed, named; the others are.
    with tarfile.open(tmp_path / "dupmember.tar", "w") as t:
        for name, data in (("e.jpg", images[0]), ("e.cls", b"0"), ("e.jpg", images[1]),
                           ("f.jpg", images[2]), ("f.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    code, out = run("webdataset", tmp_path / "dupmember.tar", tmp_path / "dupmember.ds")
    assert code == 0 and "dupmember.tar:e: e.jpg given twice in the shard" in out, out
    assert [k for k, _, _ in contents(tmp_path / "dupmember.ds")[1]] == ["f"]
    # One key in two shards: refused by name.
    write_wds(tmp_path / "again.tar", [("sample0000", {"jpg": images[0], "cls": b"0"})])
    code, out = run("webdataset", tmp_path / "shards-000000.tar", tmp_path / "again.tar", tmp_path / "dup")
    assert code == 2 and "sample0000" in out and "given twice" in out, out


def test_what_tar_and_unzip_do_with_odd_trees(src, tmp_path):
    """A .tar beside the class folders is a file, not a class tar; a file then
    a folder of its path is the folder; a leading '/' is stripped; each
    packs as its extraction does. A member below a file, and a zip naming a
    member twice, fail as tar -x and unzip do."""
    good = (src / "train/n01/a.JPEG").read_bytes()
    s = tmp_path / "s"
    for c in ("cat", "dog"):
        (s / c).mkdir(parents=True)
        (s / c / "a.JPEG").write_bytes(good)
    (tmp_path / "t" / "zz").mkdir(parents=True)
    (tmp_path / "t" / "zz" / "c.JPEG").write_bytes(good)
    subprocess.run(["tar", "-cf", str(s / "backup.tar"), "-C", str(tmp_path / "t"), "zz"], check=True)
    subprocess.run(["tar", "-cf", str(tmp_path / "beside.tar"), "-C", str(s), "cat", "dog", "backup.tar"],
                   check=True)
    subprocess.run("zip -qr %s cat dog backup.tar" % (tmp_path / "beside.zip"), cwd=s, shell=True, check=True)
    tar_with(tmp_path / "filedir.tar", [("t/c1/a.JPEG", good, "file"), ("t/c1/x", b"text", "file"),
                                        ("t/c1/x", b"", "dir"), ("t/c2/b.JPEG", good, "file")])
    tar_with(tmp_path / "absolute.tar", [("/t/c1/a.JPEG", good, "file"), ("t/c2/b.JPEG", good, "file")])
    for archive, how in (("beside.tar", "tar"), ("beside.zip", "unzip"), ("filedir.tar", "tar"),
                         ("absolute.tar", "tar")):
        ext = tmp_path / (archive + ".x")
        assert extract(tmp_path / archive, how, ext) == 0, archive
        code, out = run("imagenet", ext, tmp_path / (archive + ".want"))
        assert code == 0, out
        code, out = run("imagenet", tmp_path / archive, tmp_path / (archive + ".got"))
        assert code == 0, (archive, out)
        assert contents(tmp_path / (archive + ".got")) == contents(tmp_path / (archive + ".want")), archive
    assert sk.Dataset(str(tmp_path / "beside.tar.got")).classes == ["cat", "dog"]
    tar_with(tmp_path / "below.tar", [("t/c1/x", b"text", "file"), ("t/c1/x/y.JPEG", good, "file")])
    assert extract(tmp_path / "below.tar", "tar", tmp_path / "below.x") != 0
    code, out = run("imagenet", tmp_path / "below.tar", tmp_path / "below")
    assert code == 2 and "which is a file" in out and not (tmp_path / "below").exists(), out
    with zipfile.ZipFile(tmp_path / "twice.zip", "w") as z:
        z.writestr("t/c1/a.JPEG", good)
        z.writestr("t/c1/a.JPEG", good[:100])
    code, out = run("imagenet", tmp_path / "twice.zip", tmp_path / "twice")
    assert code == 2 and "given twice in the zip" in out and not (tmp_path / "twice").exists(), out


def test_a_folders_links_are_skipped_unless_followed_and_out_is_not_in_src(src, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(src / "train", tree)
    os.symlink(str(tree / "n01" / "a.JPEG"), tree / "n02" / "link.JPEG")
    os.symlink("/etc", tree / "etc")
    code, out = run("imagenet", tree, tmp_path / "plain")
    assert code == 0 and "link.JPEG: a symbolic link, not followed" in out, out
    keys = [r[0] for r in contents(tmp_path / "plain")[1]]
    assert "n02/link.JPEG" not in keys and not any(k.startswith("etc/") for k in keys)
    code, out = run("imagenet", "--strict", tree, tmp_path / "strict")
    assert code == 2 and not (tmp_path / "strict").exists(), out
    os.unlink(tree / "etc")
    code, out = run("imagenet", "--follow-links", tree, tmp_path / "followed")
    assert code == 0 and "n02/link.JPEG" in [r[0] for r in contents(tmp_path / "followed")[1]], out
    for out_dir in (tree, tree / "out", tree / "n01" / "deeper" / "out"):
        code, out = run("imagenet", tree, out_dir)
        assert code == 2 and "OUT is inside SRC" in out, out
    assert not (tree / "out").exists() and not (tree / "n01" / "deeper").exists()
    assert not [n for n in os.listdir(tree) if n.startswith(".shardkit") or n == "manifest.json"]


def test_gzip_members_that_end_anywhere_in_a_read(src, tmp_path):
    """A tar.gz of two gzip members (as pigz or a concatenation makes), the
    first ending one byte before the reader's 1 MiB buffer does: the next
    member's magic straddles two reads, and the archive is still valid."""
    import gzip
    import random
    rnd = random.Random(7)
    with tarfile.open(tmp_path / "plain.tar", "w") as t:
        for i in range(6):
            img = Image.frombytes("RGB", (300, 300), rnd.randbytes(270000))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=100)  # noise: ~250 KB each
            data = buf.getvalue()
            info = tarfile.TarInfo("t/c%d/%d.JPEG" % (i % 2, i))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    tar = (tmp_path / "plain.tar").read_bytes()
    assert len(tar) > (1 << 20) + 4096
    cut = next(k for k in range((1 << 20) - 200, 1 << 20)
               if len(gzip.compress(tar[:k], compresslevel=0, mtime=0)) == (1 << 20) - 1)
    (tmp_path / "two.tar.gz").write_bytes(gzip.compress(tar[:cut], compresslevel=0, mtime=0) +
                                          gzip.compress(tar[cut:], mtime=0))
    assert subprocess.run(["gzip", "-t", str(tmp_path / "two.tar.gz")]).returncode == 0
    for name in ("plain.tar", "two.tar.gz"):
        code, out = run("imagenet", tmp_path / name, tmp_path / (name + ".ds"))
        assert code == 0, (name, out)
    assert contents(tmp_path / "two.tar.gz.ds") == contents(tmp_path / "plain.tar.ds")


def test_idx_dimensions_that_overflow_are_refused(tmp_path):
    import struct
    images = struct.pack(">BBBB", 0, 0, 8, 3) + struct.pack(">III", 16, 1 << 30, 1 << 30)
    labels = struct.pack(">BBBB", 0, 0, 8, 1) + struct.pack(">I", 16) + bytes(16)
    (tmp_path / "img").write_bytes(images)
    (tmp_path / "lab").write_bytes(labels)
    code, out = run("idx", "--images", tmp_path / "img", "--labels", tmp_path / "lab", tmp_path / "o")
    assert code == 2 and "img" in out and not (tmp_path / "o").exists(), out
