"""The live view's truth program (tests/python/test_live_leak_rows.py): a
training loop of 14 optimizer steps whose every step keeps one tensor of 3333
floats (13332 bytes: a step leak the leak analysis finds, 12 blocks after its
two warm-up steps), and one host block of 77777 bytes from libc's malloc that
is never freed (a leak at exit). KEEP_LINE and MALLOC_LINE mark their lines."""
import ctypes

import torch

torch.manual_seed(0)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
keep, host = [], []
for step in range(14):
    loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    keep.append(torch.full((3333,), float(step)))  # KEEP_LINE
    if step == 2:
        host.append(libc.malloc(77777))  # MALLOC_LINE
print("done", len(keep))
