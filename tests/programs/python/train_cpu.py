"""A small CPU training loop under msmemscope: Linear + ReLU + Linear, Adam,
8 steps. Runs the same with plain python3 and under the CLI.

argv[1]: output folder (Python mode); argv[2] (optional): events.
"""
import sys

import torch

import msmemscope

out = sys.argv[1] if len(sys.argv) > 1 else "out"
events = sys.argv[2] if len(sys.argv) > 2 else "alloc,free,launch,access,traceback"
msmemscope.config(device="cpu", events=events, analysis="", output=out)

torch.manual_seed(0)
msmemscope.start()
with msmemscope.describe.describer(owner="model"):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(8, 16)
y = torch.randn(8, 4)
for i in range(8):
    with msmemscope.RecordFunction("train_step"):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    msmemscope.step()
msmemscope.take_snapshot(name="after training")
msmemscope.stop()
print("loss", float(loss))
