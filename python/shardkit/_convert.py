"""Arguments as the C++ core takes them: integers checked, text and paths as
bytes."""
import math
import operator
import os


def _int(name, value):
    """value as an int64 for this package's own use (the loader's options go
    to the core as given: its keyword table converts them, and the C++ core
    checks their ranges, once), or a ValueError naming the argument."""
    # Integers as operator.index takes them (NumPy and torch integers too), or
    # a float that is one exactly (3.0: MATLAB and HDF5 labels are doubles);
    # 2.99, "4" or NaN is refused, never truncated.
    try:
        v = operator.index(value)
    except TypeError:
        try:
            f = None if isinstance(value, (str, bytes)) else float(value)
        except (TypeError, ValueError):
            f = None
        if f is None or not math.isfinite(f) or not f.is_integer():
            raise ValueError("%s must be an integer, not %r" % (name, value)) from None
        v = int(f)
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError("%s=%d is out of range" % (name, v))
    return v


def _utf8(text):
    """text as UTF-8 bytes, surrogates kept (as the bytes they escape, or as
    themselves), never an error: whether it is valid is the core's to say."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _path(path, name="path"):
    """A filesystem path as bytes (any bytes a POSIX path may hold)."""
    try:
        encoded = os.fsencode(path)
    except TypeError:
        raise ValueError("%s must be a str, bytes or os.PathLike, not %r" % (name, path)) from None
    if b"\0" in encoded:  # the core would read the path only up to it
        raise ValueError("%s %r holds a null byte" % (name, path))
    return encoded
