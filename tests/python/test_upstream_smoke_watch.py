"""Upstream's smoke cases watch_aten_hash and watch_aten_bin (test/smoke at
msmemscope f069acf: run_st.py, src/test_suit/watch_test.py,
testfile/scripts/watch/), adapted to the CPU as tests/programs/python/
upstream_smoke/watch_aten.py says, run as its suite runs them:

    msmemscope bash watch_aten_{hash,bin}_cmd.sh --device=cpu \\
        --watch=torch._ops.aten.mse_loss.default,torch._ops.aten.mse_loss_backward.default[,full-content]

and checked as watch_test.py checks them (its numbers: 55 rows in the one
watch_dump_data_check_sum_*.csv, or 55 .bin files, 10 of them the script's
own watcher.watch(name="memscopeStWatch")). Issue #28 item 3: --watch on the
command line watches every start->end window of the run (5 epochs, 9
checkpoints each here), with or without a watcher call in the script."""
import csv
import os
import re
import shutil

import pytest

from conftest import BUILD, CLI, SOURCE
from test_upstream_dump_check import check_dump

pytest.importorskip("torch")

SCRIPTS = SOURCE / "tests" / "programs" / "python" / "upstream_smoke"
WATCH = "--watch=torch._ops.aten.mse_loss.default,torch._ops.aten.mse_loss_backward.default"
WATCH_ATEN_DUMP_NUMS = 55         # upstream's WATCH_ATEN_HASH_DUMP_NUMS and WATCH_ATEN_BIN_DUMP_NUMS
WATCH_ATEN_PYTHON_DUMP_NUMS = 10  # rows/files of the script's watcher.watch(name="memscopeStWatch")


def run(tmp_path, command, options):
    for f in SCRIPTS.iterdir():
        shutil.copy(f, tmp_path / f.name)
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        env.pop(k, None)
    env["PYTHONPATH"] = str(BUILD / "python")
    env["MSMEMSCOPE_PYTHON"] = str(BUILD / "python")  # the scripts' export PYTHONPATH=...
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")  # python3: Debian's, with torch
    import subprocess
    p = subprocess.run([str(CLI)] + command + options, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout[-6000:]}\nstderr:\n{p.stderr[-6000:]}"
    dumps = found(tmp_path, lambda f: f.startswith("memscope_dump_") and f.endswith(".csv"))
    assert dumps, "no dump written"
    for dump in dumps:
        check_dump(dump)  # upstream's dump_csv_check on every dump (issue #28 item 10)
    return p


def found(tmp_path, match):
    out = []
    for root, _, files in os.walk(tmp_path / "memscopeDumpResults"):
        out += [os.path.join(root, f) for f in files if match(f)]
    return sorted(out)


def check_sum_rows(tmp_path):
    """watch_test.py's compare_watch_dump_csv: one file named as upstream
    names it, its two columns; returns its rows."""
    [path] = found(tmp_path, lambda f: f.startswith("watch_dump_data_check_sum") and f.endswith(".csv"))
    assert re.match(r"watch_dump_data_check_sum_\d{1,20}\.csv", os.path.basename(path)), path
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Tensor info", "Check data sum"]
    return rows[1:]


def test_watch_aten_hash(tmp_path):
    run(tmp_path, ["bash", "watch_aten_hash_cmd.sh"], ["--device=cpu", WATCH])
    rows = check_sum_rows(tmp_path)
    assert len(rows) == WATCH_ATEN_DUMP_NUMS, [r[0] for r in rows]
    assert sum("memscopeStWatch" in r[0] for r in rows) == WATCH_ATEN_PYTHON_DUMP_NUMS


def test_watch_aten_bin(tmp_path):
    run(tmp_path, ["bash", "watch_aten_bin_cmd.sh"], ["--device=cpu", WATCH + ",full-content"])
    files = found(tmp_path, lambda f: f.endswith(".bin"))
    assert len(files) == WATCH_ATEN_DUMP_NUMS, files
    assert sum("memscopeStWatch" in os.path.basename(f) for f in files) == WATCH_ATEN_PYTHON_DUMP_NUMS
    # the watched loss is one float; the script's tensor 100x100 floats
    assert {os.path.getsize(f) for f in files if "memscopeStWatch" in f} == {100 * 100 * 4}
    assert {os.path.getsize(f) for f in files if "memscopeStWatch" not in f} == {4}
    # staged in the session folder, which is gone: nothing else left behind
    assert not [p for p in os.listdir(tmp_path / "memscopeDumpResults") if p.startswith(".msmemscope_session")]


def test_watch_without_a_call_in_the_script_every_window(tmp_path):
    """A plain loop (no msmemscope import): each epoch's window is watched,
    the loss's hash the same through its window (nothing changes it)."""
    p = run(tmp_path, [], ["--device=cpu", WATCH, "python3", "watch_aten_no_call.py"])
    assert "epochs 5" in p.stdout
    rows = check_sum_rows(tmp_path)
    names = [re.sub(r"^cpu_\d+\.", "", r[0]) for r in rows]
    assert len(rows) == 45, names
    windows = [rows[i:i + 9] for i in range(0, 45, 9)]
    for n, w in enumerate(windows, 1):
        wn = [re.sub(r"^cpu_\d+\.", "", r[0]) for r in w]
        assert wn[0] == f"aten.mse_loss_{n}-aten.mse_loss_0_after.bin", wn
        assert wn[-2:] == [f"aten.mse_loss_backward_{n}-aten.mse_loss_0_before.bin",
                           f"aten.mse_loss_backward_{n}-aten.mse_loss_0_after.bin"], wn
        assert len({r[1] for r in w}) == 1, w
    assert len({w[0][1] for w in windows}) == 5  # each epoch's loss is another value
    assert "was changed by" not in p.stdout
    assert "watch: 45 checkpoint(s) written under device_*/watch_dump" in p.stdout


def test_operator_names_match_as_upstream_spells_them():
    """--watch names an operator with or without its overload, upstream's
    torch._ops form, and the default overload spelled out."""
    import subprocess
    import sys
    code = ("from msmemscope import watcher as w\n"
            "print([w._matches('aten::sum', 'aten::sum', x) for x in ('aten::sum', 'aten::sum.default', "
            "'torch._ops.aten.sum.default', 'aten.sum.default', 'aten::sum.dim_IntList', 'aten::su')])\n"
            "print([w._matches('aten::mul.Tensor', 'aten::mul', x) for x in ('aten::mul', 'aten::mul.Tensor', "
            "'torch._ops.aten.mul.Tensor', 'aten::mul.default', 'aten::mul.Scalar')])")
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("LD_PRELOAD", None)
    env.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[True, True, True, True, False, False]", "[True, True, True, False, False]"]
