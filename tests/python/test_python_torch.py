"""PyTorch on CPU: a training loop (Linear + ReLU + Linear, Adam, 8 steps)
run with plain python3 (the package spawns the host, hooks by GOT patching)
and under the CLI; both give the same kinds of rows."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, SOURCE, dump_files, process_dirs, read_dump

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "train_cpu.py"
EVENTS = "alloc,free,launch,access,traceback"


def run(tmp_path, cli):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    cmd = [PY, str(SCRIPT), "out", EVENTS]
    if cli:
        cmd = [str(BUILD / "bin" / "msmemscope"), "--device=cpu", f"--events={EVENTS}", "--analysis=",
               "--collect-mode=deferred", "--output=out", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1, dirs
    rows = read_dump(dump_files(dirs[0])[0])
    trace = dump_files(dirs[0], kind="python_trace")[0].read_text().splitlines()
    return rows, trace


def check_training_rows(rows, trace):
    steps = [r["Name"] for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert steps == [str(i) for i in range(1, 9)]
    # ATEN_START/END pairs, properly nested, with operator names
    stack = []
    names = set()
    for r in rows:
        if r["Event"] != "OP_LAUNCH":
            continue
        if r["Event Type"] == "ATEN_START":
            stack.append(r["Name"])
        else:
            assert r["Event Type"] == "ATEN_END"
            assert stack and stack.pop() == r["Name"]
        names.add(r["Name"])
        assert r["Device Id"] == "cpu"
    assert not stack
    # upstream's names: f"{func.__module__}.{func.__name__}" of the OpOverload
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.relu.default",
            "torch._ops.aten.mse_loss.default"} <= names, names
    # ACCESS rows of operator inputs/outputs
    acc = [r for r in rows if r["Event"] == "ACCESS" and r["Event Type"] in ("READ", "WRITE")]
    assert acc
    for k in ("dtype", "shape", "size", "format", "type"):
        assert k in acc[0]["attr"], acc[0]
    assert acc[0]["attr"]["dtype"] == "torch.float32"
    # tensor storage as the framework pool, with owners and pool totals
    pta = [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "PTA"]
    mallocs = [r for r in pta if r["Event"] == "MALLOC"]
    assert mallocs and any(r["Event"] == "FREE" for r in pta)
    owners = {r["attr"]["owner"] for r in mallocs}
    assert {"PTA@model", "PTA@ops@aten"} <= owners, owners
    for r in mallocs:
        assert int(r["attr"]["used"]) >= int(r["attr"]["size"]) > 0
        assert "total" in r["attr"]
    # blocks tagged after the optimizer step: weight, gradient, optimizer_state
    tags = {r["attr"]["owner"] for r in rows if r["Event"] == "ACCESS" and r["Event Type"] == "UNKNOWN"}
    assert {"PTA@weight", "PTA@gradient", "PTA@optimizer_state"} <= tags, tags
    # host heap rows of the same memory stay; the device totals count HOST only
    assert any(r["Event"] == "MALLOC" and r["Event Type"] == "HOST" for r in rows)
    snaps = [r for r in rows if r["Event"] == "SNAPSHOT"]
    assert [s["Name"] for s in snaps] == ["after training"]
    assert int(snaps[0]["attr"]["allocated"]) > 0
    # python trace: module calls, RecordFunction spans, functions
    assert trace[0] == "FuncInfo,StartTime(ns),EndTime(ns),Thread Id,Process Id"
    funcs = [l.rsplit(",", 4)[0] for l in trace[1:]]
    assert funcs.count("nn.Module: Sequential") == 8
    assert funcs.count("nn.Module: Linear") == 16
    assert funcs.count("nn.Module: ReLU") == 8
    assert funcs.count("train_step") == 8
    assert any(f.endswith(": step") and "optim" in f for f in funcs)


def kinds(rows):
    return {(r["Event"], r["Event Type"]) for r in rows}


def test_training_loop_python_mode(tmp_path):
    rows, trace = run(tmp_path, cli=False)
    check_training_rows(rows, trace)


def test_training_loop_same_kinds_with_and_without_cli(tmp_path):
    (tmp_path / "py").mkdir()
    (tmp_path / "cli").mkdir()
    rows_py, trace_py = run(tmp_path / "py", cli=False)
    rows_cli, trace_cli = run(tmp_path / "cli", cli=True)
    check_training_rows(rows_cli, trace_cli)
    assert kinds(rows_py) == kinds(rows_cli)
