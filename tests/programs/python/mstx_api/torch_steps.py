# mstx "step start" ranges as the leak analysis's steps, the same script
# under the CLI and with the Python API alone (test_python_api_mstx.py).
#   python3 torch_steps.py               under the CLI (--collect-mode=deferred)
#   python3 torch_steps.py api OUT       msmemscope.config(output=OUT)
import sys

import torch
import mstx
import msmemscope

if sys.argv[1:2] == ["api"]:
    msmemscope.config(device="cpu", events="alloc,free", analysis="leaks", output=sys.argv[2])
msmemscope.start()
keep = []
for i in range(5):
    rid = mstx.range_start("step start", None)
    tmp = torch.ones(1000 + i)                 # freed in its step
    keep.append(torch.ones(2000 + 10 * i))     # lives on: a leak from step 2 on
    del tmp
    mstx.range_end(rid)
msmemscope.stop()
