"""What the object-storage tests share: the built tools, running readers in
processes of their own (the object-storage settings are read once per
process), and loader_dump's epochs."""
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).parent
BUILD = pathlib.Path(os.environ.get("SHARDKIT_BUILD", HERE.parent.parent / "build"))
PACK = BUILD / "tools" / "pack" / "shardkit-pack"
DUMP = BUILD / "tests" / "loader_dump"
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
# The bound on a run that must end on its own: never reached unless it hangs.
HANG = 600


def run(cmd, env, check=True, **kw):
    r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                       timeout=HANG, **kw)
    if check and r.returncode != 0:
        pytest.fail(f"{cmd} exited {r.returncode}: {r.stderr}")
    return r


def child_env(rgw, nginx, **extra):
    """The environment of a reader: the S3 settings of the rgw fixture, nginx's
    certificate trusted, and EXTRA (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SHARDKIT_TLS"))}
    env.update({k: v for k, v in rgw.items() if k.startswith("AWS_")})
    env["AWS_CA_BUNDLE"] = nginx["SHARDKIT_TEST_CA_CERT"]
    env["PYTHONPATH"] = str(BUILD / "python")
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def dump(path, out, env, kind, *args):
    """loader_dump's epoch of PATH into OUT (index lines and pixels)."""
    transform = ["--transform", "train", "--size", "64"] if kind == "jpeg" else ["--transform", "none"]
    run([DUMP, path, out, *transform, "--batch", 16, "--workers", 2, *args], env)
    return pathlib.Path(out).read_bytes()




def one_line_error(r):
    """The tool failed with exit code 2 and said why in one line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, r.stderr
    return errors[0]
