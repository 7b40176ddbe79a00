"""MATLAB files, differentially: `shardkit-pack svhn` and `shardkit-pack mat`
against torchvision.datasets.SVHN (scipy.io.loadmat, its transpose, its
label 10 -> 0, PIL and ToTensor) on files made here: scipy.io.savemat level 5
with and without compression, and h5py with MATLAB's 512-byte header for 7.3.
A pack holds record for record (pixels and labels) what torchvision reads.
Then every layout the images may have, the label classes, --part, and bad
input: truncations, wrong names, lengths, types, ranks, labels outside the
classes, dimensions no file could hold, corrupt compressed data, a FIFO;
each exit 2 with one line naming the file and the variable, nothing in OUT,
and nothing printed by libmatio or HDF5."""
import os
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import shardkit_module, tool

sk = shardkit_module()
scipy_io = pytest.importorskip("scipy.io")
h5py = pytest.importorskip("h5py")
torchvision = pytest.importorskip("torchvision")
from torchvision import transforms as TV  # noqa: E402


def pack(*args):
    r = subprocess.run([tool("tools", "pack", "shardkit-pack"), *map(str, args)],
                       capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode(), r.stderr.decode("utf-8", "replace")


def svhn_arrays(n, seed=0):
    """SVHN's variables as its files hold them: X 32x32x3xN uint8, y Nx1 double 1..10."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = rng.integers(1, 11, (n, 1)).astype(np.float64)
    y[0] = 10
    return X, y


def save5(path, variables, compress):
    scipy_io.savemat(str(path), variables, do_compression=compress)


MATLAB_CLASS = {"uint8": "uint8", "float64": "double", "int32": "int32", "uint16": "uint16"}


def save73(path, variables):
    """A MATLAB 7.3 file: HDF5 behind MATLAB's 512-byte header, each variable
    a dataset of the reversed dimensions with a MATLAB_class attribute (a
    null-terminated fixed-length string, as MATLAB writes it)."""
    with h5py.File(str(path), "w", userblock_size=512) as f:
        for name, value in variables.items():
            d = f.create_dataset(name, data=np.ascontiguousarray(value.T), compression="gzip", chunks=True)
            cls = MATLAB_CLASS[str(value.dtype)]
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(len(cls))
            tid.set_strpad(h5py.h5t.STR_NULLTERM)
            attr = h5py.h5a.create(d.id, b"MATLAB_class", tid, h5py.h5s.create(h5py.h5s.SCALAR))
            attr.write(np.array(cls.encode(), dtype="S%d" % len(cls)), mtype=tid)
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    header = header.ljust(116, b" ") + b"\0" * 8 + b"\x00\x02" + b"IM"
    with open(path, "r+b") as f:
        f.write(header.ljust(512, b"\0"))


class _SVHN(torchvision.datasets.SVHN):
    def _check_integrity(self):  # the files are made here, not the published ones
        return True


def torchvision_records(folder, split="train"):
    """The study's pipeline: SVHN(split) with ToTensor, as (label, HxWxC uint8)."""
    ds = _SVHN(str(folder), split=split, transform=TV.ToTensor())
    out = []
    for img, label in ds:
        out.append((int(label), (img * 255).round().byte().permute(1, 2, 0).numpy()))
    return out


def records(path):
    d = sk.Dataset(str(path))
    return [(int(label), np.asarray(payload)) for payload, label in (d[i] for i in range(len(d)))]


def same(a, b):
    return len(a) == len(b) and all(la == lb and np.array_equal(xa, xb) for (la, xa), (lb, xb) in zip(a, b))


@pytest.fixture(scope="module")
def svhn(tmp_path_factory):
    """train_32x32.mat as level 5 compressed (what SVHN ships), level 5 plain
    and 7.3, the same arrays in each, and torchvision's reading of it."""
    top = tmp_path_factory.mktemp("svhn")
    X, y = svhn_arrays(57)
    files = {}
    for kind, write in (("compressed", lambda p: save5(p, {"X": X, "y": y}, True)),
                        ("plain", lambda p: save5(p, {"X": X, "y": y}, False)),
                        ("v73", lambda p: save73(p, {"X": X, "y": y}))):
        (top / kind).mkdir()
        write(top / kind / "train_32x32.mat")
        files[kind] = top / kind / "train_32x32.mat"
    return top, files, X, y, torchvision_records(top / "compressed")


def test_svhn_pack_equals_torchvisions_svhn_record_for_record(svhn, tmp_path):
    top, files, X, y, reference = svhn
    assert reference[0][0] == 0, "torchvision maps label 10 to 0"
    for kind, path in files.items():
        code, out, err = pack("svhn", path, tmp_path / kind)
        assert code == 0, err
        assert "packed 57 of 57 records (32x32x3, 10 classes)" in out
        assert sk.Dataset(str(tmp_path / kind)).classes == [str(c) for c in range(10)]
        assert same(records(tmp_path / kind), reference), kind + ": records differ from torchvision's SVHN"
    # The generic command with SVHN's settings is the same dataset.
    code, _, err = pack("mat", files["compressed"], tmp_path / "generic", "--images", "X", "--labels", "y",
                        "--label-map", "10:0", "--class-names", ",".join(str(c) for c in range(10)))
    assert code == 0, err
    assert same(records(tmp_path / "generic"), reference)
    # 7.3 files torchvision cannot read (scipy reads no HDF5): the same arrays, the same dataset.
    assert same(records(tmp_path / "v73"), records(tmp_path / "compressed"))


def test_the_read_progress_line_shows_one_throughput(svhn, tmp_path):
    """`pack hdf5` printed '13.3k MB/s 15.3 GB/s'; a read phase shows its bytes and one rate."""
    _, files, X, y, _ = svhn
    with h5py.File(str(tmp_path / "a.h5"), "w") as f:
        f["images"] = np.ascontiguousarray(X.transpose(3, 0, 1, 2))
        f["labels"] = y[:, 0].astype(np.int32)
    for args in (("hdf5", tmp_path / "a.h5", tmp_path / "h", "--images", "images", "--labels", "labels"),
                 ("svhn", files["compressed"], tmp_path / "s")):
        code, _, err = pack(*args)
        assert code == 0, err
        lines = [line for line in err.splitlines() if line.startswith("read ")]
        assert lines, err
        for line in lines:
            assert line.count("/s") == 1 and " of " in line and "done in" in line, line


def test_every_layout_of_the_images_packs_matlab_indexing(tmp_path):
    """Record i, pixel (h, w, c) is X(h, w, c, i) as MATLAB indexes it, which
    is scipy's X[h, w, c, i]; for an N-first array X(i, h, w, c)."""
    rng = np.random.default_rng(1)
    n = 23
    cases = {
        "HWCN": (rng.integers(0, 256, (5, 7, 3, n), dtype=np.uint8), lambda X, i: X[:, :, :, i]),
        "HWN": (rng.integers(0, 256, (5, 7, n), dtype=np.uint8), lambda X, i: X[:, :, i, None]),
        "NHWC": (rng.integers(0, 256, (n, 5, 7, 2), dtype=np.uint8), lambda X, i: X[i]),
        "NHW": (rng.integers(0, 256, (n, 5, 7), dtype=np.uint8), lambda X, i: X[i, :, :, None]),
    }
    labels = rng.integers(0, 4, (1, n)).astype(np.uint8)  # a row vector, uint8
    for name, (X, item) in cases.items():
        expected = [(int(labels[0, i]), item(X, i)) for i in range(n)]
        for kind in ("c", "p", "h"):
            path = tmp_path / ("%s_%s.mat" % (name, kind))
            if kind == "h":
                save73(path, {"images": X, "labels": labels})
            else:
                save5(path, {"images": X, "labels": labels}, kind == "c")
            out = tmp_path / ("%s_%s" % (name, kind))
            code, _, err = pack("mat", path, out, "--images", "images", "--labels", "labels", "--shard-size", 4096)
            assert code == 0, err
            assert same(records(out), expected), "%s (%s)" % (name, kind)
            assert sk.Dataset(str(out)).classes == ["0", "1", "2", "3"]


def test_labels_of_any_integer_class_and_the_classes_they_form(tmp_path):
    X, _ = svhn_arrays(9)
    for dtype in (np.uint8, np.int32, np.uint16, np.float64):
        y = np.array([[3, 0, 1, 7, 7, 2, 0, 5, 1]], dtype=dtype).T
        save5(tmp_path / "a.mat", {"X": X, "y": y}, True)
        code, out, err = pack("mat", tmp_path / "a.mat", tmp_path / str(np.dtype(dtype)), "--images", "X",
                              "--labels", "y", "--label-map", "7:4")
        assert code == 0, err
        d = sk.Dataset(str(tmp_path / str(np.dtype(dtype))))
        assert d.classes == ["0", "1", "2", "3", "4", "5"], "0..max label after the map"
        assert [d[i][1] for i in range(len(d))] == [3, 0, 1, 4, 4, 2, 0, 5, 1]


def test_parts_merge_to_the_one_process_dataset(svhn, tmp_path):
    _, files, *_ = svhn
    code, _, err = pack("svhn", files["compressed"], tmp_path / "whole", "--shard-size", 20000)
    assert code == 0, err
    for i in range(3):
        code, _, err = pack("svhn", files["compressed"], tmp_path / ("part%d" % i), "--shard-size", 20000,
                            "--part", "%d/3" % i)
        assert code == 0, err
    code, _, err = pack("merge", tmp_path / "merged", *[tmp_path / ("part%d" % i) for i in range(3)])
    assert code == 0, err
    whole = sorted(os.listdir(tmp_path / "whole"))
    for name in whole:
        if name.endswith(".sks"):
            assert open(tmp_path / "whole" / name, "rb").read() == open(tmp_path / "merged" / name, "rb").read()
    assert same(records(tmp_path / "whole"), records(tmp_path / "merged"))


def refused(tmp_path, args, *needles):
    """Exit 2, one line naming what is asked, no OUT, nothing from libmatio or HDF5."""
    out = tmp_path / "refused"
    code, stdout, err = pack(*args[:2], out, *args[2:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (args, err)
    assert lines and lines[0].startswith("shardkit-pack: error: "), err
    assert all(line.startswith(("shardkit-pack: error: ", "hint: ")) for line in lines), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "-E-" not in err and "HDF5-DIAG" not in err and "-W-" not in err, err
    assert not os.path.exists(out), "OUT left behind"
    return lines[0]


def level5_elements(data):
    """The top-level elements of a level 5 file: (offset, type, size)."""
    pos, out = 128, []
    while pos + 8 <= len(data):
        t, n = struct.unpack_from("<II", data, pos)
        out.append((pos, t, n))
        pos += 8 + n
    return out


def test_truncated_files_are_refused_naming_the_variable(svhn, tmp_path):
    _, files, *_ = svhn
    for kind in ("compressed", "plain"):
        data = files[kind].read_bytes()
        (x_at, _, x_size), (y_at, _, y_size) = level5_elements(data)[:2]
        for cut, name in ((x_at + 200, "X"), (x_at + x_size // 2, "X"), (y_at + 8 + y_size - 1, "y")):
            (tmp_path / "t.mat").write_bytes(data[:cut])
            refused(tmp_path, ("svhn", tmp_path / "t.mat"), "t.mat:%s: truncated" % name)
        (tmp_path / "t.mat").write_bytes(data[:100])
        refused(tmp_path, ("svhn", tmp_path / "t.mat"), "t.mat: not a MATLAB file")
        (tmp_path / "t.mat").write_bytes(data + b"\0\0\0")
        refused(tmp_path, ("svhn", tmp_path / "t.mat"), "t.mat: truncated: 3 stray bytes")
    data = files["v73"].read_bytes()
    for cut in (300, len(data) // 2, len(data) - 10):
        (tmp_path / "t.mat").write_bytes(data[:cut])
        refused(tmp_path, ("svhn", tmp_path / "t.mat"), "t.mat")


def test_corrupt_compressed_data_is_refused_and_libraries_print_nothing(svhn, tmp_path):
    _, files, *_ = svhn
    data = bytearray(files["compressed"].read_bytes())
    x_at, _, x_size = level5_elements(bytes(data))[0]
    for offset in (x_at + 8 + x_size // 3, x_at + 8 + x_size - 2):  # the deflate stream, its Adler-32
        bad = bytearray(data)
        bad[offset] ^= 0x55
        (tmp_path / "c.mat").write_bytes(bytes(bad))
        refused(tmp_path, ("svhn", tmp_path / "c.mat"), "c.mat:X: ")
    # A damaged chunk inside the 7.3 file's HDF5: HDF5's deflate filter fails, quietly.
    data = bytearray(files["v73"].read_bytes())
    with h5py.File(str(files["v73"]), "r") as f:
        offset = 512 + f["X"].id.get_chunk_info(0).byte_offset  # past the userblock
    data[offset + 100:offset + 140] = b"\xff" * 40
    (tmp_path / "c73.mat").write_bytes(bytes(data))
    refused(tmp_path, ("svhn", tmp_path / "c73.mat"), "c73.mat:X")


def test_wrong_names_lengths_types_ranks_and_labels_are_refused_naming_the_variable(tmp_path):
    X, y = svhn_arrays(12)
    m = tmp_path / "m.mat"
    save5(m, {"X": X, "y": y}, True)
    refused(tmp_path, ("mat", m, "--images", "images", "--labels", "y"), "m.mat: no variable 'images' (it holds X, y)")
    refused(tmp_path, ("mat", m, "--images", "X", "--labels", "labels"), "no variable 'labels'")
    cases = [
        ({"X": X, "y": y[:11]}, "length mismatch", "m.mat:X", "11 labels"),
        ({"X": X.astype(np.float64), "y": y}, "m.mat:X: images must be uint8, not double"),
        ({"X": X.astype(np.int16), "y": y}, "m.mat:X: images must be uint8, not int16"),
        ({"X": X.reshape(32 * 32 * 3, 12), "y": y}, "m.mat:X: images must have rank 3 or 4"),
        ({"X": X, "y": np.array(["abcdefghijkl"])}, "m.mat:y: labels must be a vector of integers"),
        ({"X": X, "y": y.reshape(3, 4)}, "m.mat:y: labels must be a vector"),
        ({"X": X, "y": y + 0.5}, "m.mat:y: label 10.5", "not an integer"),
    ]
    # SVHN's labels are 1..10 (10 the digit 0): any other value, 0 included, is
    # refused alike, naming it and its index (issue 62: a 0 was packed as 0).
    for bad, dtype in ((0, np.float64), (11, np.float64), (255, np.float64), (-1, np.float64),
                       (0, np.uint8), (255, np.uint8)):
        labels = y.astype(dtype)
        labels[5] = bad
        cases.append(({"X": X, "y": labels}, "m.mat:y: label %d at index 5 (MATLAB's y(6)) is outside "
                      "SVHN's labels 1..10" % bad, "shardkit-pack mat"))
    for variables, *needles in cases:
        for compress in (True, False):
            save5(m, variables, compress)
            refused(tmp_path, ("svhn", m), *needles)
    save73(m, {"X": X.astype(np.float64), "y": y})
    refused(tmp_path, ("svhn", m), "m.mat:X: images must be uint8, not double")
    # Labels past --class-names; a square array whose image dimension only --layout can say.
    save5(m, {"X": X, "y": np.arange(12).reshape(12, 1)}, True)
    refused(tmp_path, ("mat", m, "--images", "X", "--labels", "y", "--class-names", "a,b"),
            "m.mat:y: label 2 at index 2 is outside the classes 0..1")
    sq = np.zeros((4, 5, 3, 4), dtype=np.uint8)  # 3 channels one way, 4 the other
    save5(m, {"X": sq, "y": np.zeros((4, 1))}, True)
    refused(tmp_path, ("mat", m, "--images", "X", "--labels", "y"), "m.mat:X", "--layout")
    code, _, err = pack("mat", m, tmp_path / "sq", "--images", "X", "--labels", "y", "--layout", "NHWC")
    assert code == 0 and records(tmp_path / "sq")[0][1].shape == (5, 3, 4), err
    refused(tmp_path, ("mat", m, "--images", "X", "--labels", "y", "--label-map", "1:2,1:3"), "maps 1 twice")


def patch_dims(data, element, dims_patch):
    """A level 5 file with one uncompressed variable's dimensions rewritten
    (its header's third and later 4-byte words after the flags)."""
    at = level5_elements(data)[element][0]
    data = bytearray(data)
    for k, v in dims_patch.items():
        struct.pack_into("<i", data, at + 8 + 16 + 8 + 4 * k, v)
    return bytes(data)


def recompress(data, element, edit):
    """A level 5 file with one compressed variable inflated, edited, deflated."""
    elements = level5_elements(data)
    at, _, n = elements[element]
    inner = bytearray(zlib.decompress(data[at + 8:at + 8 + n]))
    edit(inner)
    packed = zlib.compress(bytes(inner))
    return data[:at] + struct.pack("<II", 15, len(packed)) + packed + data[at + 8 + n:]


def test_dimensions_no_file_could_hold_are_refused_before_any_allocation(tmp_path):
    X, y = svhn_arrays(6)
    m = tmp_path / "m.mat"
    save5(m, {"X": X, "y": y}, False)
    data = m.read_bytes()
    for dims in ({3: 1 << 30}, {0: 1 << 30, 1: 1 << 30}, {3: -1}):
        (tmp_path / "h.mat").write_bytes(patch_dims(data, 0, dims))
        refused(tmp_path, ("svhn", tmp_path / "h.mat"), "h.mat:X: ")
    # The data element claims the bytes too: it is then longer than the file.
    bad = bytearray(patch_dims(data, 0, {3: 1 << 30}))
    x_at = level5_elements(data)[0][0]
    struct.pack_into("<I", bad, x_at + 8 + 16 + 24 + 8 + 4, (1 << 31))  # X's data tag size (after the name)
    (tmp_path / "h.mat").write_bytes(bytes(bad))
    refused(tmp_path, ("svhn", tmp_path / "h.mat"), "h.mat")
    # A struct or cell array declaring a billion elements, compressed or not,
    # before the variables asked for: libmatio would allocate them as it lists the file.
    meta = np.zeros((2, 1), dtype=[("a", "O"), ("b", "O")])
    meta[0, 0] = (np.array([[1.0]]), np.array(["x"]))
    meta[1, 0] = (np.array([[2.0]]), np.array(["y"]))
    cells = np.empty((1, 3), dtype=object)
    cells[0, :] = [np.array([[1.0]]), np.array(["z"]), np.zeros((0, 0))]
    for extra in ({"meta": meta}, {"cells": cells}):
        for compress in (False, True):
            save5(m, {**extra, "X": X, "y": y}, compress)
            data = m.read_bytes()
            if compress:
                def billion(inner):
                    struct.pack_into("<i", inner, 8 + 16 + 8, 1 << 30)
                bad = recompress(data, 0, billion)
            else:
                bad = patch_dims(data, 0, {0: 1 << 30})
            (tmp_path / "h.mat").write_bytes(bad)
            refused(tmp_path, ("svhn", tmp_path / "h.mat"), "h.mat:%s: " % list(extra)[0], "fewer bytes")
    # 7.3: a dataset declaring more elements than its file could hold, however compressed.
    with h5py.File(str(tmp_path / "huge.h5"), "w", userblock_size=512) as f:
        f.create_dataset("X", shape=(1 << 40, 3, 32, 32), dtype=np.uint8, chunks=(1, 3, 32, 32))
        f.create_dataset("y", data=np.ones((1, 4)))
    raw = bytearray((tmp_path / "huge.h5").read_bytes())
    raw[:128] = (b"MATLAB 7.3 MAT-file".ljust(116, b" ") + b"\0" * 8 + b"\x00\x02IM")
    (tmp_path / "huge.mat").write_bytes(bytes(raw))
    refused(tmp_path, ("svhn", tmp_path / "huge.mat"), "huge.mat:X: declares more elements than the file")


def test_what_is_not_a_level_5_or_73_file_is_refused_by_path(tmp_path):
    fifo = tmp_path / "fifo.mat"
    os.mkfifo(fifo)
    refused(tmp_path, ("svhn", fifo), "fifo.mat")
    refused(tmp_path, ("svhn", tmp_path / "missing.mat"), "missing.mat")
    refused(tmp_path, ("svhn", tmp_path), str(tmp_path))
    scipy_io.savemat(str(tmp_path / "v4.mat"), {"X": np.zeros((20, 20))}, format="4")
    refused(tmp_path, ("svhn", tmp_path / "v4.mat"), "v4.mat: not a MATLAB level 5 or 7.3 file")
    X, y = svhn_arrays(3)
    save5(tmp_path / "be.mat", {"X": X, "y": y}, False)
    data = bytearray((tmp_path / "be.mat").read_bytes())
    data[126:128] = b"MI"
    (tmp_path / "be.mat").write_bytes(bytes(data))
    refused(tmp_path, ("svhn", tmp_path / "be.mat"), "be.mat: a big-endian MATLAB file")


def save73_as(path, variables):
    """save73 with each variable's MATLAB_class given: {name: (array, class)}."""
    with h5py.File(str(path), "w", userblock_size=512) as f:
        for name, (value, cls) in variables.items():
            d = f.create_dataset(name, data=np.ascontiguousarray(value.T))
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(len(cls))
            tid.set_strpad(h5py.h5t.STR_NULLTERM)
            attr = h5py.h5a.create(d.id, b"MATLAB_class", tid, h5py.h5s.create(h5py.h5s.SCALAR))
            attr.write(np.array(cls.encode(), dtype="S%d" % len(cls)), mtype=tid)
    header = b"MATLAB 7.3 MAT-file".ljust(116, b" ") + b"\0" * 8 + b"\x00\x02" + b"IM"
    with open(path, "r+b") as f:
        f.write(header)


def test_a_73_class_attribute_that_is_not_the_stored_type_is_refused(tmp_path):
    """libmatio converts what is stored into the declared class (clamping and
    rounding): int16 pixels up to 1001 declared uint8 would pack as 255, and
    labels 0.5 / 300.0 declared uint8 as 0 / 255."""
    X, y = svhn_arrays(4)
    lies = {
        "int16_as_uint8": ({"X": (X.astype(np.int16) * 4, "uint8"), "y": (y, "double")}, "X: declared uint8"),
        "double_as_uint8": ({"X": (X, "uint8"), "y": (y + 0.5, "uint8")}, "y: declared uint8"),
        "uint16_as_uint8": ({"X": (X.astype(np.uint16), "uint8"), "y": (y, "double")}, "X: declared uint8"),
        "float_as_double": ({"X": (X, "uint8"), "y": (y.astype(np.float32), "double")}, "y: declared double"),
        "int8_as_uint8": ({"X": (X.astype(np.int8), "uint8"), "y": (y, "double")}, "X: declared uint8"),
    }
    for name, (variables, needle) in lies.items():
        save73_as(tmp_path / (name + ".mat"), variables)
        refused(tmp_path, ("svhn", tmp_path / (name + ".mat")), name + ".mat:" + needle)
    save73_as(tmp_path / "honest.mat", {"X": (X, "uint8"), "y": (y, "double")})
    code, _, err = pack("svhn", tmp_path / "honest.mat", tmp_path / "honest")
    assert code == 0, err
    # A variable that is not packed may lie: the file is read for the others.
    save73_as(tmp_path / "other.mat", {"X": (X, "uint8"), "y": (y, "double"),
                                       "notes": (X.astype(np.int16) * 4, "uint8")})
    code, _, err = pack("svhn", tmp_path / "other.mat", tmp_path / "other")
    assert code == 0, err
    assert same(records(tmp_path / "other"), records(tmp_path / "honest"))


def test_data_outside_the_file_is_refused_not_read_as_zeros(tmp_path):
    """A virtual dataset whose source is gone, and external raw storage, read
    as their fill value (zeros) where the data is missing: refused, in HDF5
    files and in 7.3 MATLAB files alike."""
    layout = h5py.VirtualLayout((4, 8, 8), "u1")
    layout[:] = h5py.VirtualSource(str(tmp_path / "gone.h5"), "d", shape=(4, 8, 8))
    with h5py.File(tmp_path / "virtual.h5", "w") as f:
        f.create_virtual_dataset("images", layout, fillvalue=0)
        f["labels"] = np.arange(4, dtype="i4")
    (tmp_path / "raw.bin").write_bytes(np.full(100, 9, "u1").tobytes())  # 100 of 256 bytes
    with h5py.File(tmp_path / "external.h5", "w") as f:
        f.create_dataset("images", shape=(4, 8, 8), dtype="u1",
                         external=[(str(tmp_path / "raw.bin"), 0, h5py.h5f.UNLIMITED)])
        f["labels"] = np.arange(4, dtype="i4")
    for name, needle in (("virtual", "a virtual dataset"), ("external", "stored in external raw files")):
        refused(tmp_path, ("hdf5", tmp_path / (name + ".h5"), "--images", "images", "--labels", "labels"),
                name + ".h5:images: " + needle)
    X, y = svhn_arrays(2)
    save73_as(tmp_path / "ext73.mat", {"X": (X, "uint8"), "y": (y, "double")})
    with h5py.File(tmp_path / "ext73.mat", "a") as f:  # X again, now stored outside the file
        data = f["X"][...]
        del f["X"]
        (tmp_path / "x.bin").write_bytes(data.tobytes())
        d = f.create_dataset("X", shape=data.shape, dtype="u1", external=[(str(tmp_path / "x.bin"), 0, data.nbytes)])
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(5)
        tid.set_strpad(h5py.h5t.STR_NULLTERM)
        h5py.h5a.create(d.id, b"MATLAB_class", tid, h5py.h5s.create(h5py.h5s.SCALAR)).write(
            np.array(b"uint8", dtype="S5"), mtype=tid)
    refused(tmp_path, ("svhn", tmp_path / "ext73.mat"), "ext73.mat:X: stored in external raw files")


def test_auto_layout_never_reads_labels_as_long_as_the_rows_as_image_counts(tmp_path):
    """32 labels for 32 x 32 x 3 x 100 images: N-first would be 32 images of
    100 channels, so auto takes no reading and says why (an explicit
    --layout still reads it so)."""
    scipy_io.savemat(str(tmp_path / "t.mat"), {"X": np.zeros((32, 32, 3, 100), "u1"), "y": np.ones((32, 1))})
    line = refused(tmp_path, ("mat", tmp_path / "t.mat", "--images", "X", "--labels", "y"),
                   "length mismatch", "holds 32 labels")
    assert "100 channels" in line and "--layout NHWC" in line, line
    code, _, err = pack("mat", tmp_path / "t.mat", tmp_path / "explicit", "--images", "X", "--labels", "y",
                        "--layout", "NHWC")
    assert code == 0, err
