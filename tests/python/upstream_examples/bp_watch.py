"""Adapted from upstream's docs/zh/best_practices §3 (memory block watch):
a 256x256 tensor is watched with dump_nums=3 while two operators run on it
(an add and a mul, each making a new tensor), then removed; the script runs
under `msmemscope --watch=start:op0,end:op1,full-content`. The device is the
CPU (no torch.npu.synchronize: CPU operators run in order)."""
import torch
import msmemscope

test_tensor = torch.randn(256, 256).to("cpu")
msmemscope.watcher.watch(test_tensor, name="test_tensor", dump_nums=3)

result = test_tensor + 1
result = result * 2

msmemscope.watcher.remove(test_tensor)
print("Test finished.")
