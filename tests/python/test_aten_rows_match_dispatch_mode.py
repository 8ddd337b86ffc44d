"""The C++ operator observer writes the operator rows a dispatch mode writes.

Upstream collects aten operators with a Python TorchDispatchMode
(python/msmemscope/aten_collection.py), and so does our package where the
C++ observer cannot load. A mode sees a call when it reaches the Python
dispatch key with no call of the mode's own in progress: not what an
operator's kernel calls inside it (bmm's select and as_strided per batch, a
copy's empty_strided), and not an operator that decomposes above the Python
key (linear, matmul, softmax, layer_norm, to, item run their
CompositeImplicitAutograd kernel at the autograd key; the mode sees what they
call) -- except under inference_mode, where there is no autograd key and the
mode sees the composite operator itself. The observer hears every call into
the dispatcher (a RecordFunction callback) and wrote a row pair for each:
~5,100 a step of a GPT-style training loop where the mode writes ~950.

Two differences remain, both made by the mode's presence, not by the program:
* under a dispatch mode PyTorch detaches the outputs autograd saves
  (softmax, tanh, exp, ...): the mode lists a detach call after each, which
  the program without a mode never makes;
* torch.autograd.profiler.record_function (Optimizer.step is wrapped in one)
  enters through profiler::_record_function_enter, an operator PyTorch keeps
  from RecordFunction callbacks; the mode lists it, the observer lists the
  empty() it makes inside.
"""
import csv
import os
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, DUMP_HEADER, dump_files, process_dirs

pytest.importorskip("torch")
PY = "/usr/bin/python3"

PROG = textwrap.dedent("""\
    import sys
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if sys.argv[2] == "mode":  # no C++ observer: the package's TorchDispatchMode
        sys.modules["msmemscope._torch_observer"] = None
    import msmemscope
    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln(x)).split(d, dim=2)
            att = (q @ k.transpose(-2, -1).contiguous()) * (d ** -0.5)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
            return x + self.fc(F.gelu(y))

    model = nn.Sequential(nn.Embedding(32, 16), Block(16), Block(16))
    head = nn.Linear(16, 32)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-3)
    data = torch.randint(0, 32, (2, 9))
    msmemscope.config(device="cpu", events="alloc,free,launch,access", analysis="", output=sys.argv[1])
    msmemscope.start()
    for _ in range(2):
        logits = head(model(data[:, :-1]))
        loss = F.cross_entropy(logits.reshape(-1, 32), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print("loss", loss.to(torch.float64).item())
    with torch.inference_mode():
        out = head(model(data))
    msmemscope.stop()
    print("done", out.shape)
""")

RECORD_FUNCTION_ENTER = "torch._ops.profiler._record_function_enter.default"
DETACH = "torch._ops.aten.detach.default"


def operator_rows(tmp_path, tracker):
    """(Event, Event Type, Name, Attr) of every OP_LAUNCH and ACCESS row, in
    order; Attr without the block's allocation_id and address (another run)."""
    script = tmp_path / "prog.py"
    script.write_text(PROG)
    out = tmp_path / f"out_{tracker}"
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"), LD_PRELOAD="")
    e.pop("MSMEMSCOPE_SESSION", None)
    r = subprocess.run([PY, str(script), str(out), tracker], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "done torch.Size([2, 9, 32])" in r.stdout
    (d,) = process_dirs(out)
    (dump,) = dump_files(d)
    with open(dump, newline="") as fh:
        rd = csv.reader(fh)
        assert next(rd) == DUMP_HEADER
        return [(rec[1], rec[2], rec[3], re.sub(r"(allocation_id:\d+|addr:0x[0-9a-f]+),", "", rec[9]))
                for rec in rd if rec[1] in ("OP_LAUNCH", "ACCESS")]


def without_calls(rows, name):
    """rows without the calls of operator `name` (their START, ACCESS and END rows)."""
    kept, skipping = [], 0
    for row in rows:
        if row[0] == "OP_LAUNCH" and row[2] == name and row[1] == "ATEN_START":
            skipping += 1
        elif skipping and row[0] == "OP_LAUNCH" and row[2] == name and row[1] == "ATEN_END":
            skipping -= 1
        elif not skipping:
            kept.append(row)
    return kept


def starts(rows):
    return [r[2] for r in rows if r[0] == "OP_LAUNCH" and r[1] == "ATEN_START"]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rows")
    return operator_rows(tmp, "observer"), operator_rows(tmp, "mode")


def test_the_observer_writes_the_rows_the_dispatch_mode_writes(both):
    observer, mode = both
    # the mode's own doing (see the top of this file)
    assert DETACH in starts(mode) and DETACH not in starts(observer)
    mode = without_calls(mode, DETACH)
    # Optimizer.zero_grad and Optimizer.step each enter a record_function, 2 steps
    assert starts(mode).count(RECORD_FUNCTION_ENTER) == 4
    mode = [(e, t, "torch._ops.aten.empty.memory_format" if n == RECORD_FUNCTION_ENTER else n, a)
            for e, t, n, a in mode]
    assert len(observer) > 400
    assert observer == mode


def test_no_row_for_a_kernel_s_own_calls_nor_a_decomposed_operator(both):
    observer, _ = both
    names = starts(observer)
    # bmm's per-batch views, a copy's allocation: inside an operator
    for inner in ("as_strided.default", "select.int", "empty_strided.default", "resolve_conj.default"):
        assert f"torch._ops.aten.{inner}" not in names
    # linear decomposes above the Python key with autograd (t + addmm) ...
    item = "torch._ops.aten._local_scalar_dense.default"  # loss...item(), the last before inference_mode
    last_item = len(names) - 1 - names[::-1].index(item)
    training, inference = names[:last_item], names[last_item + 1:]
    assert "torch._ops.aten.linear.default" not in training
    assert "torch._ops.aten.addmm.default" in training and "torch._ops.aten.t.default" in training
    assert "torch._ops.aten.bmm.default" in training and "torch._ops.aten.matmul.default" not in training
    # ... and is one operator under inference_mode, as the mode sees it
    assert "torch._ops.aten.linear.default" in inference
    assert "torch._ops.aten.addmm.default" not in inference
