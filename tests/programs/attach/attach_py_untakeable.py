"""A Python loop started without msmemscope, whose msmemscope collectors
cannot be taken out at the detach, for ``msmemscope --attach``
(tests/python/test_attach.py).

    python3 attach_py_untakeable.py READY PATCHED STOP

Creates READY (holding its pid), then loops, allocating, until STOP exists.
Once the attach's Python side has loaded msmemscope's collectors into it,
it makes their removal fail (``_collect.disable_all`` raises "on purpose")
and creates PATCHED: the detach's Python side then has a failure to say.
Prints "done" at the end (its own stdout, nothing of msmemscope's).
"""
import os
import sys

ready, patched, stop = sys.argv[1], sys.argv[2], sys.argv[3]


def cannot_take_out():
    raise RuntimeError("on purpose")


with open(ready, "w") as f:
    f.write(str(os.getpid()))

kept = []
while not os.path.exists(stop):
    kept = [bytearray(512) for _ in range(8)]  # the malloc family: the attach gets in here
    collect = sys.modules.get("msmemscope._collect")
    if collect is not None and collect.disable_all is not cannot_take_out:
        collect.disable_all = cannot_take_out
        with open(patched, "w") as f:
            f.write("1")
print("done")
