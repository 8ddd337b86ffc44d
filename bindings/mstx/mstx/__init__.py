"""mstx for Python: marks and ranges that profilers (msmemscope, msprof) see.

Pure Python over the mstx C library (ctypes). Used when CANN's own `mstx`
module is absent; the calls are the same::

    import mstx
    mstx.mark("checkpoint saved")
    rid = mstx.range_start("step start", None)   # a "step start" range is a step
    ...
    mstx.range_end(rid)

The library is, in this order: $MSTX_LIBRARY (a path), CANN's
libms_tools_ext.so ($ASCEND_HOME_PATH/lib64, then the loader's search path),
the libms_tools_ext.so shipped beside this file. Without a profiler attached
every call does nothing and range_start returns 0.
"""
import ctypes
import os

__all__ = ["mark", "range_start", "range_end", "library_path"]

_LIB_NAME = "libms_tools_ext.so"


def _candidates():
    env = os.environ.get("MSTX_LIBRARY")
    if env:
        yield env
    home = os.environ.get("ASCEND_HOME_PATH")
    if home:
        yield os.path.join(home, "lib64", _LIB_NAME)
    yield _LIB_NAME
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        if not hasattr(lib, "mstxRangeStartA"):
            continue
        lib.mstxMarkA.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.mstxMarkA.restype = None
        lib.mstxRangeStartA.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.mstxRangeStartA.restype = ctypes.c_uint64
        lib.mstxRangeEnd.argtypes = [ctypes.c_uint64]
        lib.mstxRangeEnd.restype = None
        return lib, path
    raise ImportError("mstx: cannot load " + _LIB_NAME + ("; " + "; ".join(errors) if errors else ""))


_lib, library_path = _load()


def _message(message):
    if message is None:
        raise ValueError("mstx: message must not be None")
    if isinstance(message, bytes):
        return message
    return str(message).encode("utf-8")


def _stream(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    for attr in ("npu_stream", "stream_id", "value"):  # framework stream objects
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise TypeError("mstx: stream must be None, an int handle, or a framework stream")


def mark(message, stream=None):
    """A point in time named `message`."""
    _lib.mstxMarkA(_message(message), _stream(stream))


def range_start(message, stream=None):
    """Starts a range named `message`; returns its id (0 without a profiler)."""
    return int(_lib.mstxRangeStartA(_message(message), _stream(stream)))


def range_end(range_id):
    """Ends the range `range_id` returned by range_start."""
    _lib.mstxRangeEnd(ctypes.c_uint64(int(range_id)))
