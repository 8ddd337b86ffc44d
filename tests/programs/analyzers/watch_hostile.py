"""A program whose watch checkpoints name files it did not stage (issue #29):
each argv[2:] path is sent as a full-content checkpoint's `file`, through the
target-side watch library (argv[1], libmsms_watch.so), as a tampered capture
or dump would name them ("{pid}" in a path becomes this process's pid). The
host must move none of them."""
import ctypes
import os
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.msms_watch_record.restype = ctypes.c_int
lib.msms_watch_record.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint16,
                                  ctypes.c_int16]
for i, path in enumerate(a.replace("{pid}", str(os.getpid())) for a in sys.argv[2:]):
    rc = lib.msms_watch_record(b"aten::add.Tensor", i + 1, b"aten::mul.Tensor", 0, 1, None, 0, path.encode(), 1, -1)
    assert rc == 0, rc
print("sent", len(sys.argv) - 2)
