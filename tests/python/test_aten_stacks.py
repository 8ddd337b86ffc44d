"""Operator rows carry the Python stack, as upstream's current code writes
them: with Python stacks collected, AtenManager::ReportAtenLaunch and
ReportAtenAccess (csrc/event_trace/mstx_hooks/aten_manager.cpp) take the
Python call stack for every ATEN_START, ATEN_END and ACCESS row, and never a
C one. Ours: the stack where the operator was called, taken once per
operator call (its end and its tensors' accesses share it), from the C++
observer and from the Python dispatch mode that replaces it where the
observer cannot load.
"""
import csv
import os
import subprocess
import textwrap

import pytest

from conftest import BUILD, DUMP_HEADER, dump_files, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

PROG = textwrap.dedent("""\
    import sys
    import torch
    torch.manual_seed(0)
    x = torch.randn(8, 8, requires_grad=True)
    w = torch.randn(8, 8)
    def f(a, b):
        return (a @ b).relu()
    y = f(x, w)
    z = y.sum()
    z.backward()
    print("done", float(x.grad.sum()))
""")
LINE_MM = 7        # return (a @ b).relu()   (in f)
LINE_CALL_F = 8    # y = f(x, w)
LINE_BACKWARD = 10  # z.backward()


def op_rows(dump):
    """OP_LAUNCH and ACCESS rows, in order, as dicts by DUMP_HEADER."""
    with open(dump, newline="") as fh:
        r = csv.reader(fh)
        assert next(r) == DUMP_HEADER
        return [dict(zip(DUMP_HEADER, rec)) for rec in r if rec[1] in ("OP_LAUNCH", "ACCESS")]


def calls_of(rows):
    """Each operator call: (its ATEN_START row, its ACCESS rows, its ATEN_END
    row), matched by nesting on the one thread."""
    open_calls, done = [], []
    for row in rows:
        if row["Event"] == "OP_LAUNCH" and row["Event Type"] == "ATEN_START":
            open_calls.append((row, []))
        elif row["Event"] == "ACCESS":
            open_calls[-1][1].append(row)
        elif row["Event"] == "OP_LAUNCH" and row["Event Type"] == "ATEN_END":
            start, accesses = open_calls.pop()
            assert start["Name"] == row["Name"], (start, row)
            done.append((start, accesses, row))
    assert open_calls == []
    return done


def frames(row):
    # (the dispatch mode's rows start in torch's wrapper of a mode's
    # __torch_dispatch__, torch/utils/_python_dispatch.py, as its tensors'
    # allocations do: the caller follows)
    out = row["Call Stack(Python)"].splitlines()
    while out and "/torch/utils/_python_dispatch.py(" in out[0]:
        out = out[1:]
    return out


def check_stacks(calls, prog, shift=0):
    """`shift`: lines put before PROG's own."""
    line_mm, line_call_f, line_backward = LINE_MM + shift, LINE_CALL_F + shift, LINE_BACKWARD + shift
    assert len(calls) > 10
    for start, accesses, end in calls:
        # every row of a call has the call's stack, the operator's caller first
        assert frames(start), start
        assert [frames(a) for a in accesses] == [frames(start)] * len(accesses), (start, accesses)
        assert frames(end) == frames(start), (start, end)
        assert not start["Call Stack(C)"] and not end["Call Stack(C)"]
        assert all(not a["Call Stack(C)"] for a in accesses)
        # no frame of msmemscope's own package (the dispatch mode's hook)
        assert not any("/msmemscope/" in fr for fr in frames(start)), frames(start)
    mm = [s for s, _, _ in calls if s["Name"] == "torch._ops.aten.mm.default"]
    forward = [s for s in mm if frames(s)[0] == f"{prog}({line_mm}): f"]
    assert forward and frames(forward[0])[1] == f"{prog}({line_call_f}): <module>", [frames(s) for s in mm]
    # the backward pass's operators run under z.backward()
    backward = [s for s, _, _ in calls if s["Name"] == "torch._ops.aten.threshold_backward.default"]
    assert backward, sorted({s["Name"] for s, _, _ in calls})
    assert frames(backward[0])[-1] == f"{prog}({line_backward}): <module>", frames(backward[0])


def test_operator_rows_carry_the_operators_python_stack(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p = run_cli(["--device=cpu", "--call-stack=python", "--events=alloc,free,launch,access", "--analysis=",
                 "--output=out", "--", PY, "prog.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""},
                check_rc=0)
    assert "done" in p.stdout
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    check_stacks(calls_of(op_rows(dump)), tmp_path / "prog.py")


def test_operator_rows_carry_no_c_stack(tmp_path):
    # upstream's operator rows never carry a C stack; without Python stacks
    # they carry none
    (tmp_path / "prog.py").write_text(PROG)
    run_cli(["--device=cpu", "--call-stack=c:8", "--events=alloc,free,launch,access", "--analysis=",
             "--output=out", "--", PY, "prog.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    rows = op_rows(dump)
    assert len(rows) > 40
    assert [r for r in rows if r["Call Stack(Python)"] or r["Call Stack(C)"]] == []


def test_dispatch_mode_operator_rows_carry_the_stack_too(tmp_path):
    # the Python dispatch mode (no C++ observer) writes the same rows
    script = tmp_path / "prog.py"
    script.write_text(PROG.replace("import torch\n", textwrap.dedent("""\
        import torch
        sys.modules["msmemscope._torch_observer"] = None
        import msmemscope
        msmemscope.config(device="cpu", call_stack="python", events="alloc,free,launch,access", analysis="",
                          output=sys.argv[1])
        msmemscope.start()
        """), 1))
    shift = 5  # the lines put in above
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"), LD_PRELOAD="")
    e.pop("MSMEMSCOPE_SESSION", None)
    r = subprocess.run([PY, str(script), str(tmp_path / "out")], cwd=tmp_path, env=e, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    check_stacks(calls_of(op_rows(dump)), script, shift)


def test_operator_rows_carry_the_stack_in_sqlite_too(tmp_path):
    # the db stores each stack once; memscope_dump (a view) gives every row its text
    import sqlite3
    (tmp_path / "prog.py").write_text(PROG)
    run_cli(["--device=cpu", "--call-stack=python", "--events=alloc,free,launch,access", "--analysis=",
             "--data-format=db", "--output=out", "--", PY, "prog.py"], tmp_path,
            env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (d,) = process_dirs(tmp_path / "out")
    (db,) = sorted((d / "device_cpu" / "dump").glob("memscope_dump_*.db"))
    con = sqlite3.connect(str(db))
    rows = [dict(zip(DUMP_HEADER, rec)) for rec in con.execute(
        "SELECT * FROM memscope_dump WHERE \"Event\" IN ('OP_LAUNCH', 'ACCESS') ORDER BY \"ID\"")]
    con.close()
    check_stacks(calls_of(rows), tmp_path / "prog.py")
