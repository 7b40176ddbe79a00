"""The command-line tools of a pip-installed shardkit.

The wheel carries the C++ executables in shardkit/bin; these entry points
(the `shardkit-pack`, ... scripts on the environment's PATH) replace the
Python process with the tool, so arguments, exit codes, signals and output
are the tool's own.
"""
import os
import sys


def _run(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(path, os.X_OK):
        hint = " (it needs LibTorch when the wheel is built)" if name == "shardkit-train" else ""
        sys.stderr.write("%s: error: not part of this installation of shardkit%s\n" % (name, hint))
        sys.exit(2)
    os.execv(path, [name] + sys.argv[1:])


def pack():
    _run("shardkit-pack")


def bench():
    _run("shardkit-bench")


def report():
    _run("shardkit-report")


def augment():
    _run("shardkit-augment")


def train():
    _run("shardkit-train")
