"""A PEP 517 build backend for shardkit: runs the project's CMake and packs
the result into a wheel.

    pip install .                          (on a machine with a package index)
    pip install --no-build-isolation .     (with Debian's packages, no index)
    pip wheel . -w dist/

The wheel holds the package `shardkit` (the pure-Python modules and the
pybind11 extension, built for the interpreter running pip) and the tools
shardkit-pack, -bench, -augment and, where CMake finds LibTorch,
shardkit-train, in shardkit/bin with entry points on the environment's PATH.
The extension links no torch, so any PyTorch the environment has works.

Config settings (pip's -C/--config-settings):
  build-dir=DIR      the CMake build directory (default build-pip/<python tag>);
                     an existing, configured one is reused as it is
  cmake-args="..."   more arguments for CMake's configure step
The environment variable SHARDKIT_CMAKE_ARGS adds to cmake-args.
"""
import base64
import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOLS = {
    "shardkit-pack": "tools/pack/shardkit-pack",
    "shardkit-bench": "tools/bench/shardkit-bench",
    "shardkit-report": "tools/report/shardkit-report",
    "shardkit-augment": "tools/augment/shardkit-augment",
    "shardkit-train": "train/shardkit-train",
}


def _version():
    """CMake's project(VERSION): the one version number."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(shardkit VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no project(shardkit VERSION ...)")
    return m.group(1)


def _project():
    """pyproject.toml's [project] table: description and scripts."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    # A reader for this file's own simple lines, for Pythons without tomllib.
    project, table = {"scripts": {}}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                table = line.strip("[]")
                continue
            m = re.match(r'^([\w.-]+|"[^"]+")\s*=\s*"(.*)"$', line)
            if m and table == "project":
                project[m.group(1)] = m.group(2)
            elif m and table == "project.scripts":
                project["scripts"][m.group(1)] = m.group(2)
    return project


def _tag():
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name[:2]
    py = "%s%d%d" % (impl, sys.version_info[0], sys.version_info[1])
    abi = py + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return py, abi, plat


def _settings(config_settings):
    cs = config_settings or {}
    build = cs.get("build-dir") or os.path.join(ROOT, "build-pip", "-".join(_tag()))
    args = shlex.split(cs.get("cmake-args", "")) + shlex.split(os.environ.get("SHARDKIT_CMAKE_ARGS", ""))
    return os.path.abspath(build), args


def _say(msg):
    sys.stderr.write("shardkit build: %s\n" % msg)
    sys.stderr.flush()


def _run(cmd):
    _say(" ".join(shlex.quote(c) for c in cmd))
    subprocess.check_call(cmd, cwd=ROOT)


def _interpreter():
    """The interpreter CMake builds the extension for: this one, or the one
    a virtual environment was made from (the same headers and ABI), so that a
    build directory made by another environment of the same Python is reused."""
    base = getattr(sys, "_base_executable", None)
    if base and os.path.exists(base) and os.path.realpath(base) != os.path.realpath(sys.executable):
        out = subprocess.run([base, "-c", "import sys; print(sys.version_info[:3])"], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.strip() == str(tuple(sys.version_info[:3])):
            return base
    return sys.executable


def _configure(build, extra):
    if os.path.exists(os.path.join(build, "CMakeCache.txt")) and not extra:
        return  # configured before: reuse it as it is
    args = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DSHARDKIT_BUILD_TESTS=OFF",
            "-DPython3_EXECUTABLE=" + _interpreter()]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    try:  # pybind11 from pip, where the build environment has it
        import pybind11

        args.append("-Dpybind11_DIR=" + pybind11.get_cmake_dir())
    except ImportError:
        pass
    try:  # LibTorch from the environment's PyTorch, for shardkit-train
        import torch.utils

        args.append("-DCMAKE_PREFIX_PATH=" + torch.utils.cmake_prefix_path)
    except ImportError:
        pass
    try:
        _run(args + extra)
    except subprocess.CalledProcessError:
        _say("configure failed; trying again without LibTorch (no shardkit-train in this wheel)")
        _run(args + extra + ["-DSHARDKIT_WITH_TORCH=OFF"])


def _cache(build, name):
    with open(os.path.join(build, "CMakeCache.txt"), errors="replace") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def _build(build):
    targets = ["_shardkit", "shardkit-pack", "shardkit-bench", "shardkit-report", "shardkit-augment"]
    if _cache(build, "SHARDKIT_WITH_TORCH") in ("ON", "1", "TRUE"):
        targets.append("shardkit-train")
    _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1), "--target"] + targets)
    ext = [f for f in os.listdir(os.path.join(build, "python", "shardkit")) if f.startswith("_shardkit")]
    if not ext:
        raise RuntimeError("%s: the extension was not built (needs python3-dev and pybind11)" % build)
    want = sysconfig.get_config_var("EXT_SUFFIX")
    if not any(f.endswith(want) for f in ext):
        raise RuntimeError("%s holds %s, built for another Python than %s (%s): use another build-dir"
                           % (build, ext, sys.executable, want))


def _report_torch():
    """Says which interpreter the extension is built for and whether torch
    imports there: shardkit.Loader yields torch tensors (Dataset, Writer and
    the tools do not need it). Shown by pip install -v; pip shows it on
    failure too."""
    target = sys.executable
    out = subprocess.run([target, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    version = ".".join(map(str, sys.version_info[:3]))
    if out.returncode == 0:
        _say("built for %s (Python %s); torch %s imports there" % (target, version, out.stdout.strip()))
    else:
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
        _say("built for %s (Python %s); torch does NOT import there (%s): shardkit.Loader will raise "
             "ImportError until PyTorch is installed for this interpreter (with pip's build isolation "
             "on, this check cannot see the environment's packages)" % (target, version, why))


def _wheel_files(build):
    """(path in the wheel, file on disk, executable)"""
    pkg = os.path.join(ROOT, "python", "shardkit")
    files = [("shardkit/" + f, os.path.join(pkg, f), False) for f in sorted(os.listdir(pkg))
             if f.endswith((".py", ".pyi")) or f == "py.typed"]
    ext_suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = os.path.join(build, "python", "shardkit")
    files += [("shardkit/" + f, os.path.join(built, f), False) for f in os.listdir(built)
              if f.startswith("_shardkit") and f.endswith(ext_suffix)]
    for name, rel in TOOLS.items():
        path = os.path.join(build, rel)
        if os.path.exists(path):
            files.append(("shardkit/bin/" + name, path, True))
    return files


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(version):
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: shardkit", "Version: " + version,
             "Summary: " + p.get("description", ""), "Requires-Python: " + p.get("requires-python", ">=3.8")]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8", errors="replace") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _dist_info(version, tag):
    p = _project()
    scripts = "".join("%s = %s\n" % (k.strip('"'), v) for k, v in p.get("scripts", {}).items())
    return {
        "METADATA": _metadata(version),
        "WHEEL": "Wheel-Version: 1.0\nGenerator: shardkit_build\nRoot-Is-Purelib: false\nTag: %s\n" % tag,
        "entry_points.txt": "[console_scripts]\n" + scripts,
    }


# ---- PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    """CMake and pybind11 from the index, where the machine lacks them."""
    reqs = []
    if shutil.which("cmake") is None:
        reqs.append("cmake>=3.18")
    have_pybind11 = any(os.path.exists(os.path.join(p, "pybind11")) for p in ("/usr/lib/cmake", "/usr/share/cmake",
                                                                            "/usr/local/lib/cmake"))
    if not have_pybind11:
        reqs.append("pybind11>=2.10")
    return reqs


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    name = "shardkit-%s.dist-info" % version
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    for fname, text in _dist_info(version, "-".join(_tag())).items():
        with open(os.path.join(metadata_directory, name, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build, extra = _settings(config_settings)
    _configure(build, extra)
    _build(build)
    _report_torch()
    version = _version()
    tag = "-".join(_tag())
    name = "shardkit-%s-%s.whl" % (version, tag)
    dist_info = "shardkit-%s.dist-info" % version
    os.makedirs(wheel_directory, exist_ok=True)
    tmp = os.path.join(wheel_directory, name + ".part")
    record = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, path, executable in _wheel_files(build):
            with open(path, "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16  # pip reads both
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append("%s,%s,%d" % (arc, _record_hash(data), len(data)))
        for fname, text in _dist_info(version, tag).items():
            data = text.encode("utf-8")
            z.writestr("%s/%s" % (dist_info, fname), data)
            record.append("%s/%s,%s,%d" % (dist_info, fname, _record_hash(data), len(data)))
        record.append("%s/RECORD,," % dist_info)
        z.writestr("%s/RECORD" % dist_info, "\n".join(record) + "\n")
    os.replace(tmp, os.path.join(wheel_directory, name))
    _say("wrote %s (%s)" % (name, ", ".join(sorted(a for a, _, x in _wheel_files(build) if x)) or "no tools"))
    return name
