"""An inference loop that never calls optimizer.step() or msmemscope.step():
its key/value cache dict grows by one entry per generated token (the leak),
everything else of an iteration is freed. Run under the CLI with
--step-on=__main__:generate_token (tests/python/test_step_on.py)."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
cache = {}


def generate_token(i, x):
    h = model(x)
    cache[i] = h.detach().clone()  # kept for every later token: the leak
    return h.sum().item()


with torch.no_grad():
    x = torch.ones(8, 64)
    total = 0.0
    for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        total += generate_token(i, x)
print("tokens", len(cache), flush=True)
