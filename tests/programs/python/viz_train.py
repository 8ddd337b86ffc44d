"""A few CPU training steps with the memory_viz sink selected from Python
(sinks as a list), Python and C stacks on. argv[1]: output folder.
The test finds its frames by the markers below."""
import sys

import torch

import msmemscope

msmemscope.config(device="cpu", events="alloc,free", call_stack="python:20,c:12", analysis="",
                  output=sys.argv[1], sinks=["memory_viz"])
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
msmemscope.start()
kept = []
for i in range(3):
    x = torch.randn(32, 64)
    y = model(x)  # VIZ_FORWARD
    y.sum().backward()
    kept.append(torch.zeros(4096))  # VIZ_KEEP
    msmemscope.step()
msmemscope.stop()
print("done", len(kept))
