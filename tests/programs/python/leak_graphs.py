"""A training loop of a user's own that keeps every step's loss (with its
graph: each step's activations stay alive) and appends one batch a step to
a list: hundreds of framework blocks leak, from a few sites.

    python leak_graphs.py STEPS
prints 'kept N tensors' at the end."""
import sys

import torch
from torch import nn

torch.manual_seed(0)
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
losses = []   # the bug: the loss is kept with its graph
batches = []  # the second bug: every batch is kept


def train_step(step):
    x = torch.randn(32, 64)
    y = torch.randn(32, 8)
    batches.append(x)
    out = model(x)
    loss = ((out - y) ** 2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    losses.append(loss)
    for _ in range(8):  # more kept activations: small graph pieces per step
        losses.append((out * 2).sum() + loss)
    opt.step()


for step in range(STEPS):
    train_step(step)
print("kept", len(losses) + len(batches), "tensors")
