"""A tensor watched with a checkpoint budget that runs out: five in-place
adds on w, watched with dump_nums=3 (upstream counts a before and an after
as one dump each), so only the first add is checked whole.

    watch_budget.py CONFIG_JSON

CONFIG_JSON: keywords for msmemscope.config ("{}" under the CLI)."""
import json
import sys

import torch

import msmemscope

cfg = json.loads(sys.argv[1])
if cfg:
    msmemscope.config(**cfg)

msmemscope.start()
w = torch.zeros(16)
msmemscope.watcher.watch(w, name="w", dump_nums=3)
for i in range(5):
    w.add_(1.0)                       # each add changes w
msmemscope.watcher.remove(w)
msmemscope.stop()
print("w", float(w[0]))
