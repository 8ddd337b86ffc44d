"""A CPU training loop for the end-to-end analyzer tests: Linear + ReLU +
Linear, Adam, 8 steps, msmemscope.step() after each.

    train.py CONFIG_JSON [feature ...]

CONFIG_JSON: keywords for msmemscope.config ("{}" under the CLI).
Features:
  keep        keeps one 16 KiB tensor per step (a leak from step 2 on)
  early       allocates a buffer, frees another block, then first writes the
              buffer (an early allocation for inefficient)
  plant       after training: c = a * b; d = a + 1; c.fill_(7); s = c.sum()
              (fill_ overwrites the output of mul)
  user_watch  like plant, but c is watched by watcher.watch(c, name="c")
"""
import json
import sys

import torch

import msmemscope

cfg = json.loads(sys.argv[1])
features = set(sys.argv[2:])
if cfg:
    msmemscope.config(**cfg)

torch.manual_seed(0)
msmemscope.start()
with msmemscope.describe.describer(owner="model"):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
with msmemscope.describe.describer(owner="cache"):
    cache = torch.zeros(2048)         # a describer label that stays (PTA@cache)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(8, 16)
y = torch.randn(8, 4)
kept = []
for i in range(8):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if "keep" in features:
        kept.append(torch.full((4096,), float(i)))
    msmemscope.step()

if "early" in features:
    buf = torch.empty(3000)           # allocated long before its first use
    tmp = torch.ones(5000)
    del tmp                           # another API frees memory in between
    buf.fill_(1.0)                    # first access
    print("early", hex(buf.data_ptr()))

if "plant" in features or "user_watch" in features:
    a = torch.ones(16)
    b = torch.full((16,), 2.0)
    c = a * b                         # watched output (plant: --watch=aten::mul,aten::sum)
    if "user_watch" in features:
        msmemscope.watcher.watch(c, name="c")
    d = a + 1                         # does not touch c
    c.fill_(7.0)                      # overwrites c
    s = c.sum()                       # end op
    if "user_watch" in features:
        msmemscope.watcher.remove(c)
    t = d.sum()                       # not checkpointed any more
    print("sum", float(s), float(t))

msmemscope.stop()
print("loss", float(loss))
