"""An out-of-memory failure on CPU under msmemscope: keeps four tensors, then
asks torch for an impossible 1 PiB tensor (its allocator's posix_memalign
fails, torch raises). Runs the same with plain python3 (Python API) and under
the CLI (--collect-mode=deferred: collection between start() and stop()).

argv[1]: output folder (Python mode); argv[2]: the analyses (default oom:3).
"""
import sys

import torch

import msmemscope

msmemscope.config(device="cpu", events="alloc,free", analysis=sys.argv[2] if len(sys.argv) > 2 else "oom:3",
                  output=sys.argv[1])
msmemscope.start()
keep = [torch.ones(1 << 18) for _ in range(4)]  # 1 MiB each
try:
    torch.empty(1 << 50, dtype=torch.uint8)
    print("no failure")
except RuntimeError:
    print("allocation failed")
msmemscope.stop()
