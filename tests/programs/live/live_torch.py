"""The live view's PyTorch program (tests/python/test_live_view.py): a
training loop whose every step keeps one 1 MiB tensor (a leak the step
analysis finds); after step BARRIER_AT it reads one byte from the FIFO
argv[1] (a barrier the test opens), then runs the rest."""
import sys

import torch

fifo, barrier_at = sys.argv[1], int(sys.argv[2])
keep = []
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 9):
    loss = model(torch.randn(256, 64)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    keep.append(torch.ones(1024, 256))  # LEAK_LINE: 1 MiB kept per step
    if step == barrier_at:
        with open(fifo, "rb") as f:
            f.read(1)
print("done")
