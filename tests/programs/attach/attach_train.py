"""A PyTorch training loop started without msmemscope, for
``msmemscope --attach`` (tests/python/test_attach.py).

    python3 attach_train.py READY GO RESULT [STEPS]

Trains a small model with a fixed seed (deterministic, one thread) for
8 warm-up steps, creates READY, then keeps allocating scratch tensors (no
random numbers, nothing the model sees) until GO exists, then trains STEPS
(default 12) more steps, leaking one 4 KiB tensor per step into a list.
Writes the final loss and every parameter's bytes to RESULT and prints the
final loss: both must be the same with and without an attach/detach.
"""
import os
import sys

import torch

ready, go, result = sys.argv[1], sys.argv[2], sys.argv[3]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 12

torch.manual_seed(1234)
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(256, 64)
y = torch.randint(0, 10, (256,))
kept = []


def train_step(i):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


for i in range(8):
    loss = train_step(i)

with open(ready, "w") as f:
    f.write(str(os.getpid()))

# Waiting for the test: the process keeps working (and allocating) meanwhile.
spin = 0
while not os.path.exists(go):
    scratch = torch.zeros(2048) + spin
    spin += 1

for i in range(steps):
    loss = train_step(8 + i)
    kept.append(torch.full((1024,), float(i)))  # the leak: 4 KiB per step, never freed

with open(result, "wb") as f:
    f.write(repr(loss.item()).encode() + b"\n")
    for p in model.parameters():
        f.write(p.detach().numpy().tobytes())
print(f"final loss {loss.item()!r}")
