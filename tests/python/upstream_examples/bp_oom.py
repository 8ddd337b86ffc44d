"""Adapted from upstream's docs/zh/best_practices §6 (memory snapshot at an
out-of-memory failure): events alloc and free, CSV under ./output; then
tensors of 1024x1024x128 floats (512 MiB) are made until the allocator
fails, and the failure is caught and printed. The device is the CPU; the
test limits the address space (ulimit -v), so the failure comes after a
few tensors. Argument "cli": no msmemscope calls (the command line
collects, as in the user guide's `msmemscope --analysis=oom python train.py`)."""
import sys

import torch

CLI = len(sys.argv) > 1 and sys.argv[1] == "cli"
if not CLI:
    import msmemscope

    msmemscope.config(device="cpu", events="alloc,free", data_format="csv", output="./output")
    msmemscope.start()

device = torch.device("cpu")
tensors = []
try:
    for i in range(100):
        tensors.append(torch.randn(1024, 1024, 128).to(device))
except RuntimeError as e:
    print(f"OOM detected: {str(e).splitlines()[0]}")
print(f"allocated {len(tensors)} tensor(s) before the failure")

if not CLI:
    msmemscope.stop()
