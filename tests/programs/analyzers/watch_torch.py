"""Runs under `msmemscope --watch=aten::mul.Tensor,aten::sum.default`: a small
TorchDispatchMode drives the watch helper (as the Python package does); one
op (aten::fill_) overwrites the watched output of aten::mul."""
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Under the CLI the package itself watches what --watch names (issue #28
# item 3); this program tests the helper alone, so the package's watch mode
# (installed when torch was imported) is taken out first.
try:
    from msmemscope import watcher as _package_watcher
    _package_watcher._state.update(spec=None, spec_read=True)
    _package_watcher.range_stopped()
except ImportError:
    pass

sys.path.insert(0, sys.argv[1])  # plugins/analyzers/watch/python
import msmemscope_watch  # noqa: E402

lib = msmemscope_watch.load_library(sys.argv[2])
assert lib is not None, "libmsms_watch.so not found"
spec = os.environ.get("WATCH_SPEC", "aten::mul.Tensor,aten::sum.default")
w = msmemscope_watch.Watcher.from_spec(spec)


class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket.__name__)
        op = f"aten::{name}.{func._overloadname}"
        w.before_op(op)
        out = func(*args, **(kwargs or {}))
        outs = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
        w.after_op(op, outs)
        return out


a = torch.ones(16)
b = torch.full((16,), 2.0)
with Mode():
    c = a * b          # watched output
    d = a + 1          # does not touch c
    c.fill_(7.0)       # overwrites c
    s = c.sum()        # end op
print("sum", float(s))
