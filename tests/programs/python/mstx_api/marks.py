# mstx marks and ranges, the same script under the CLI and with the Python
# API alone (tests/python/test_python_api_mstx.py).
#   python3 marks.py                     under the CLI (--collect-mode=deferred)
#   python3 marks.py api OUT [KEY=VALUE...]   msmemscope.config(output=OUT, KEY=VALUE...)
import sys

import mstx
import msmemscope

STEP_BYTES = 300000  # one block of STEP_BYTES + i in step i + 1

# No session yet: not recorded (collection is off), and without the CLI the
# mstx library finds no tool at this call.
mstx.mark("before start", None)
if sys.argv[1:2] == ["api"]:
    kw = dict(a.split("=", 1) for a in sys.argv[3:])
    msmemscope.config(device="cpu", events="alloc,free", analysis="", output=sys.argv[2], **kw)
msmemscope.start()
mstx.mark("training start", None)
keep = []
rid = None
for i in range(4):
    if rid is not None:
        mstx.range_end(rid)
    rid = mstx.range_start("step start", None)
    keep.append(bytearray(STEP_BYTES + i))
    inner = mstx.range_start(f"inner {i}", None)
    mstx.range_end(inner)
mstx.range_end(rid)
mstx.mark("training end", None)
msmemscope.stop()
mstx.mark("after stop", None)
print("range ids", rid, inner)
