"""A few PyTorch operators, for comparing a direct start with one through a
shell script (tests/python/test_python_any_launch.py)."""
import torch

w = torch.nn.Linear(64, 32)
x = torch.ones(16, 64)
y = w(x).relu().sum()
y.backward()
print("loss", float(y), flush=True)
