"""A small PyTorch training loop (Linear 64x64, SGD, 4 steps) that keeps one
1000-float tensor per step: the tests' shortest real loop with operators,
gradients, an optimizer and a growing Python-held list
(test_ux_suppress.py, test_torch_op_access.py)."""
import torch

keep = []
m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(4):
    loss = m(torch.randn(32, 64)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    keep.append(torch.zeros(1000))
