"""Upstream's quick start (docs/en/quick_start/quick_start.md, example/example_api.py
and example/example_cmd.py), adapted to the CPU (tests/python/upstream_examples):
what step 4, "Check the output result file", and the output file spec promise."""
import re

import pytest

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


@pytest.mark.xfail(run=False, strict=True, reason=(
    "issue #20 item 1: the documented CLI form with --device=cpu records every host malloc from the "
    "interpreter's start (about 2.2 M MALLOC/FREE HOST rows for `import torch` alone), each with up to 50 C "
    "and 50 Python frames (--call-stack=c,python): the CSV passed 2.6 GB after 15 minutes on the 2-core VM. "
    "Upstream's cpu device has no heap hooks; ours needs a way to leave the host heap out (or a far faster "
    "stack writer) before this runs as a test"))
def test_quick_start_command_line(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--events=alloc,free,access,launch", "--level=kernel,op",
                       "--call-stack=c,python", "--analysis=leaks,inefficient,decompose", "--output-path=./output",
                       "--format=csv"], [PY, "./quick_start_cmd.py"], timeout=3000)
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "output"))
    pta = rows_of(rows, "MALLOC", "PTA")
    assert pta and all(r["Call Stack(C)"] and r["Call Stack(Python)"] for r in pta)
    assert "torch._ops.aten.addmm.default" in {r["Name"] for r in rows_of(rows, "OP_LAUNCH", "ATEN_START")}
    assert {r["attr"].get("owner") for r in pta} >= {"PTA@weight", "PTA@gradient"}
