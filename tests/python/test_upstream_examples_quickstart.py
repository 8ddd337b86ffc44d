"""Upstream's quick start (docs/en/quick_start/quick_start.md, example/example_api.py
and example/example_cmd.py), adapted to the CPU (tests/python/upstream_examples):
what step 4, "Check the output result file", and the output file spec promise."""
import re

import pytest

from conftest import dump_files
from upstream_examples_util import PY, api, cli, only_process, rows_of, upstream_layout

pytest.importorskip("torch")


def test_quick_start_python_api(tmp_path):
    p = api(tmp_path, "quick_start_api.py")
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "output"))
    # alloc/free: the framework's blocks with upstream's Attr keys
    pta = rows_of(rows, "MALLOC", "PTA")
    assert pta and len(rows_of(rows, "FREE", "PTA")) > 0
    assert all(list(r["attr"])[:5] == ["allocation_id", "addr", "size", "total", "used"] for r in pta), pta[0]
    # launch at op level: the aten operators of the model, loss and optimizer
    ops = {r["Name"] for r in rows_of(rows, "OP_LAUNCH", "ATEN_START")}
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.mse_loss.default",
            "torch._ops.aten.mse_loss_backward.default"} <= ops, sorted(ops)
    assert len(rows_of(rows, "OP_LAUNCH", "ATEN_START")) == len(rows_of(rows, "OP_LAUNCH", "ATEN_END"))
    # access: reads and writes of the blocks by those operators
    acc = rows_of(rows, "ACCESS", "READ") + rows_of(rows, "ACCESS", "WRITE")
    assert acc and all(r["Name"] not in ("", "N/A") for r in acc)
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.mse_loss.default"} <= {r["Name"] for r in acc}
    # call_stack="c,python": both stacks on every framework block, the script in the Python one
    assert all(r["Call Stack(C)"] and r["Call Stack(Python)"] for r in pta)
    assert any("quick_start_api.py" in r["Call Stack(Python)"] for r in pta)
    # decompose: every framework block has its owner (weights, gradients, operators' outputs)
    owners = {r["attr"].get("owner") for r in pta}
    assert None not in owners and {"PTA@weight", "PTA@gradient", "PTA@ops@aten"} <= owners, owners
    # inefficient: blocks marked with upstream's three kinds, in their MALLOC rows' Attr
    kinds = set()
    for r in rows_of(rows, "MALLOC"):
        if "inefficient_type" in r["attr"]:
            kinds |= set(r["attr"]["inefficient_type"].split(","))
    assert kinds and kinds <= {"early_allocation", "late_deallocation", "temporary_idleness"}, kinds
    # leaks: nothing is kept across steps here, so upstream's report is silent
    assert not re.search(r"^====== ERROR: Detected memory leaks", p.stdout, re.M)


def test_quick_start_command_line(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--events=alloc,free,access,launch", "--level=kernel,op",
                       "--call-stack=c,python", "--analysis=leaks,inefficient,decompose", "--output-path=./output",
                       "--format=csv"], [PY, "./quick_start_cmd.py"], timeout=900)
    assert "Test finished." in p.stdout.splitlines()
    procdir = only_process(tmp_path / "output")
    rows = upstream_layout(procdir)
    pta = rows_of(rows, "MALLOC", "PTA")
    assert pta and all(r["Call Stack(C)"] and r["Call Stack(Python)"] for r in pta)
    assert "torch._ops.aten.addmm.default" in {r["Name"] for r in rows_of(rows, "OP_LAUNCH", "ATEN_START")}
    assert {r["attr"].get("owner") for r in pta} >= {"PTA@weight", "PTA@gradient"}
    # --device=cpu records the host heap too: the blocks that `import torch` (and the other imports of
    # the Python installation) left live are written together as one block, the imports' heap (written
    # again as it changes, counted in the summary), and grouped as such in the leak report; the
    # imports' own allocations have no rows (host_heap.python_imports=fold, framework/agent/import_fold.h;
    # test_python_import_fold.py)
    m = re.search(r"^  cpu/HOST: Python imports left up to (\d+) block\(s\), [\d.]+ [KMG]?i?B, live: written as one "
                  r"block, the imports' heap \((\d+) MALLOC row\(s\) as it changed", p.stdout, re.M)
    assert m and int(m.group(1)) > 10000, p.stdout[-3000:]
    (dump,) = dump_files(procdir)
    with open(dump) as f:
        assert sum(line.count("shadow:true,owner:HOST,import:true,blocks:") for line in f) == int(m.group(2))
    # What the imports left live at exit is one-time set-up: the built-in list takes it out of the
    # report (as it takes the import system's frames when the blocks are recorded one by one), and
    # says so; a trivial `import torch` is not a 9.5 MiB leak
    assert "allocated at: while importing Python modules" not in p.stdout, p.stdout[-3000:]
    assert re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \(\d{5,} block\(s\), \d{7,} bytes\): \d+ by "
                     r"the built-in list of one-time set-up \(the interpreter, the imports' heap, ", p.stdout, re.M), \
        p.stdout[-3000:]
