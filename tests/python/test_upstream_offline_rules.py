"""Issue #20 item 6: our rows where upstream's offline analyzers read them.

Upstream's inefficient analysis (python/msmemscope/analyzer/inefficient.py)
counts an operator's ACCESS rows to the operator only when they lie between
its ATEN_START and ATEN_END; its rule, restated in upstream_rules.py, must
find on our dump exactly what our `inefficient` analyzer marked in it,
with the rows upstream's live analyzer skips (shadow:true: blocks there
before start(), the end-of-dump FREEs of blocks live at stop()) skipped.
The workload is upstream's example/inefficient/test_inefficient.py with the
npu device replaced by the cpu (our own adaptation)."""
import os
import re
import subprocess
from collections import defaultdict

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump
from upstream_rules import inefficient_findings, leaks_findings

pytest.importorskip("torch")

EXAMPLE = """
import sys
import torch
import torch.nn as nn
import torch.optim as optim
import msmemscope

msmemscope.config(device="cpu", analysis="inefficient", events="alloc,free,access,launch,traceback",
                  data_format="csv", output=sys.argv[1])

class SimpleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)

model = SimpleModel()
criterion = nn.MSELoss()
optimizer = optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(32, 10)
targets = torch.randn(32, 10)
msmemscope.start()
for epoch in range(6):
    outputs = model(inputs)
    loss = criterion(outputs, targets)
    loss.requires_grad_(True)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
msmemscope.stop()
print("Test finished.")
"""


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory):
    """The process folder of one run of the example (plain python3, the
    Python API)."""
    tmp = tmp_path_factory.mktemp("ineff")
    (tmp / "test_inefficient.py").write_text(EXAMPLE)
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run(["/usr/bin/python3", "test_inefficient.py", str(tmp / "output")], cwd=str(tmp), env=e,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "Test finished." in p.stdout
    [d] = process_dirs(tmp / "output")
    return d


@pytest.fixture(scope="module")
def example_rows(example_dir):
    [dump] = dump_files(example_dir)
    return read_dump(dump)


def test_file_names_as_upstreams_code_makes_them(example_dir):
    """{prefix}{date %Y%m%d%H%M%S}.csv under device_{id}/dump, as upstream's
    FileCreateManager::CreateCsvFile names memscope_dump_ and python_trace_
    files (csrc/utility/file.cpp; its smoke tests match the same pattern).
    Upstream's docs write python_trace_{TID}_{timestamp}.csv, its code
    (since per-process-dump, 2025-11) does not put a thread id in the name:
    one file per device holds every thread (Thread Id column)."""
    names = sorted(p.name for p in (example_dir / "device_cpu" / "dump").iterdir())
    assert len(names) == 2, names
    assert re.fullmatch(r"memscope_dump_\d{14}\.csv", names[0]), names
    assert re.fullmatch(r"python_trace_\d{14}\.csv", names[1]), names


def test_access_rows_lie_inside_their_operator(example_rows):
    """Every READ/WRITE ACCESS row of an operator comes after that
    operator's ATEN_START and before its ATEN_END (upstream's order: start,
    input accesses, the operator, output accesses, end)."""
    open_ops = defaultdict(list)  # thread -> names of the operators open on it
    accesses = 0
    for r in example_rows:
        tid = r["Thread Id"]
        if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START":
            open_ops[tid].append(r["Name"])
        elif r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_END":
            assert open_ops[tid] and open_ops[tid][-1] == r["Name"], (r["ID"], open_ops[tid])
            open_ops[tid].pop()
        elif r["Event"] == "ACCESS" and r["Event Type"] in ("READ", "WRITE"):
            accesses += 1
            assert open_ops[tid] and open_ops[tid][-1] == r["Name"], \
                f"ACCESS row {r['ID']} of {r['Name']} outside its operator (open: {open_ops[tid]})"
    assert accesses > 100
    assert not any(open_ops.values()), dict(open_ops)


KINDS_IN_ATTR = re.compile(r"inefficient_type:((?:early_allocation|late_deallocation|temporary_idleness)"
                           r"(?:,(?:early_allocation|late_deallocation|temporary_idleness))*)")


def test_upstream_inefficient_rule_finds_what_ours_marked(example_rows):
    # a block of two kinds says `inefficient_type:early_allocation,late_deallocation`,
    # as upstream's writeback joins them (the Attr's own separator)
    ours = {int(r["ID"]): KINDS_IN_ATTR.search(r["Attr"]).group(1).split(",")
            for r in example_rows if "inefficient_type" in r["attr"]}
    theirs = inefficient_findings(example_rows)
    assert ours, "the example has inefficient blocks (late_deallocation at least)"
    assert sorted(ours.items()) == sorted(theirs.items())
    # only framework (PTA) blocks' MALLOC rows carry the mark
    by_id = {int(r["ID"]): r for r in example_rows}
    assert {(by_id[i]["Event"], by_id[i]["Event Type"]) for i in ours} == {("MALLOC", "PTA")}


def _row(i, event, etype, attr="", name="N/A", pid="1"):
    return {"ID": str(i), "Event": event, "Event Type": etype, "Name": name, "Process Id": pid,
            "Thread Id": pid, "Device Id": "0", "Attr": attr}


def test_restated_rule_on_hand_made_rows():
    """The restated rule itself, on rows whose findings are known (the
    cases of our analyzer's unit tests): A is freed late, B is allocated
    early, C's accesses are far apart, D is fine."""
    rows = [
        _row(1, "MALLOC", "PTA", "{allocation_id:1,addr:0x100,size:64}"),        # API 1: A
        _row(2, "OP_LAUNCH", "ATEN_START", name="op"),                            # API 2 reads A
        _row(3, "ACCESS", "READ", "{allocation_id:1,type:PTA,shape:torch.Size([4, 4])}", name="op"),
        _row(4, "OP_LAUNCH", "ATEN_END", name="op"),
        _row(5, "MALLOC", "PTA", "{allocation_id:2,addr:0x200,size:64}"),        # API 3 allocates B
        _row(6, "FREE", "PTA", "{allocation_id:1,addr:0x100,size:64}"),          # API 4 frees A: late
        _row(7, "MALLOC", "PTA", "{allocation_id:3,addr:0x300,size:8}"),         # API 5: D
        _row(8, "FREE", "PTA", "{allocation_id:3,addr:0x300,size:8}"),           # API 6 frees D
        _row(9, "OP_LAUNCH", "ATEN_START", name="op"),                            # API 7 reads B: early
        _row(10, "ACCESS", "READ", "{allocation_id:2,type:PTA}", name="op"),
        _row(11, "OP_LAUNCH", "ATEN_END", name="op"),
        _row(12, "MALLOC", "PTA", "{allocation_id:4,addr:0x400,size:16}"),       # API 8: C
        _row(13, "ACCESS", "READ", "{allocation_id:4,type:PTA}"),                 # API 9
        _row(14, "ACCESS", "READ", "{allocation_id:4,type:PTA}"),                 # API 10
        _row(15, "ACCESS", "READ", "{allocation_id:4,type:PTA}"),                 # API 11
        _row(16, "MALLOC", "HOST", "{allocation_id:5,addr:0x500,size:16}"),      # not a framework pool
    ]
    assert inefficient_findings(rows, idle_threshold=3000) == {1: ["late_deallocation"], 5: ["early_allocation"]}
    assert inefficient_findings(rows, idle_threshold=0) == {
        1: ["late_deallocation"], 5: ["early_allocation"], 12: ["temporary_idleness"]}
    assert inefficient_findings(rows, mem_size=65) == {}
    assert inefficient_findings(rows, kinds=("early_allocation",)) == {5: ["early_allocation"]}


def test_upstream_leak_rule_on_our_npu_dump(cli, test_bin, tmp_path, capsys):
    """Upstream's check_leaks groups rows by Device Id and needs three marks
    named as asked on the device: our MSTX rows carry the device's id in its
    file (never N/A there), so upstream's rule finds the marks and the one
    leak (tests/programs/npu/mstx_leak.c), as our check_leaks does."""
    p = cli(["--device=npu", "--analysis=", f"--output={tmp_path}/out", "--", test_bin / "npu_mstx_leak"], tmp_path,
            env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)}, check_rc=0)
    leak = int(next(l for l in p.stdout.splitlines() if l.startswith("leak ")).split()[1], 16)
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d, "0")
    rows = read_dump(dump)
    assert {r["Device Id"] for r in rows if r["Event"] == "MSTX"} == {"0"}
    assert inefficient_findings(rows) == {}  # (no framework blocks here)
    assert leaks_findings(rows, "leak check") == {"0": [("0x%016x" % leak, 2.0)]}
    assert leaks_findings(rows, "leak check", start_index=1) == {"0": None}
    import msmemscope.analyzer as an
    capsys.readouterr()
    an.check_leaks(input_path=str(dump), mstx_info="leak check", start_index=0)
    printed = capsys.readouterr().out
    assert "====== ERROR: Detected memory leaks on device 0 ======" in printed
    assert f"Direct Hal memory leak of 2.0 Mb(s) at {'0x%016x' % leak} in Index" in printed
    assert printed.count("Direct Hal memory leak") == 1
