"""A migrating msMemScope user's Python scripts, unchanged (issue #15.7):
only upstream's documented API (docs/en/api_reference/api.md and the user
guide's Python examples: config/start/step/stop, TakeSnapshot,
describe.describer, watcher.watch/remove, the analyzer module and the offline
functions), run with Debian's python3 and PyTorch; then what they produced
is checked: rows, snapshots, owners, and the offline analyses' output."""
import os
import subprocess
import textwrap

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump

pytest.importorskip("torch")
PY = "/usr/bin/python3"

TRAIN = """
    import torch
    import msmemscope
    from msmemscope import describe

    msmemscope.config(call_stack="python", events="launch,alloc,free,access", level="0", device="cpu",
                      analysis="leaks,decompose", data_format="csv", output="./output")

    @describe.describer(owner="model_init")
    def build():
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    model = build()
    msmemscope.start()
    test_tensor = torch.ones(256)
    msmemscope.watcher.watch(test_tensor, name="test", dump_nums=2)
    for i in range(3):
        with msmemscope.TakeSnapshot(0, "forward_pass"):
            with describe.describer(owner="forward"):
                out = model(torch.randn(4, 64))
        test_tensor.add_(1)
        msmemscope.step()
    msmemscope.watcher.remove(test_tensor)
    msmemscope.watcher.watch(test_tensor.data_ptr(), length=1000, name="test", dump_nums=2)
    msmemscope.watcher.remove(test_tensor.data_ptr(), length=1000)
    t = torch.zeros(32)
    describe.describer(t, owner="test4")
    msmemscope.take_snapshot(0, name="end")
    msmemscope.stop()
    print("analyzers", msmemscope.list_analyzers())
"""

MARKS = """
    import mstx
    keep = []
    for i in range(4):
        mstx.mark("test", None)
        keep.append(bytearray(1024 * (i + 1)))
"""

OFFLINE = """
    import sys
    import msmemscope
    from msmemscope.analyzer import LeaksAnalyzer, LeaksConfig, InefficientConfig, InefficientAnalyzer

    leaks_config = LeaksConfig(input_path=sys.argv[1], mstx_info="test", start_index=0)
    leaks_analyzer = LeaksAnalyzer()
    leaks_analyzer.analyze(leaks_config)
    msmemscope.check_leaks(input_path=sys.argv[1], mstx_info="test", start_index=0)

    ineff_config = InefficientConfig(input_path=sys.argv[2], mem_size=0,
                                     inefficient_type=["early_allocation", "late_deallocation", "temporary_idleness"],
                                     idle_threshold=3000)
    ineff_analyzer = InefficientAnalyzer()
    ineff_analyzer.analyze(ineff_config)
    msmemscope.analyze("inefficient", input_path=sys.argv[2], mem_size=0, inefficient_type=["early_allocation"],
                       idle_threshold=3000)
"""


def run(tmp_path, name, body, args=(), cli=None):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("MSMEMSCOPE_SESSION", None)
    env["PYTHONPATH"] = str(BUILD / "python")
    cmd = [PY, str(script)] + [str(a) for a in args]
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def the_dump(out):
    [d] = process_dirs(out)
    [f] = dump_files(d)
    return f


def test_a_migrating_users_scripts_run_unchanged(tmp_path):
    p = run(tmp_path, "train.py", TRAIN)
    assert "analyzers ['decompose', 'inefficient', 'leaks'" in p.stdout or "analyzers [" in p.stdout
    train_csv = the_dump(tmp_path / "output")
    rows = read_dump(train_csv)
    snaps = [r["Name"] for r in rows if r["Event"] == "SNAPSHOT"]
    assert snaps == ["forward_pass Start", "forward_pass End"] * 3 + ["end"]
    snap = [r for r in rows if r["Event"] == "SNAPSHOT"][0]
    assert list(snap["attr"])[:8] == ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free",
                                      "device_rate", "reserved_rate"]
    assert [r["Name"] for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"] == ["1", "2", "3"]
    owners = {r["attr"].get("owner") for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"}
    assert any(o and o.endswith("forward") for o in owners), owners
    # the model's storages existed before start(): shadow MALLOCs
    assert any(r["attr"].get("shadow") == "true" for r in rows if r["Event"] == "MALLOC")
    ops = {r["Name"] for r in rows if r["Event"] == "OP_LAUNCH"}
    assert "torch._ops.aten.addmm.default" in ops, sorted(ops)[:20]
    acc = [r for r in rows if r["Event"] == "ACCESS" and r["Event Type"] in ("READ", "WRITE")]
    assert acc and list(acc[0]["attr"])[:4] == ["allocation_id", "addr", "size", "type"]
    assert acc[0]["attr"]["type"] == "PTA" and acc[0]["attr"]["shape"].startswith("torch.Size([")
    assert any(r["Event"] == "ACCESS" and r["attr"].get("owner") == "PTA@test4" for r in rows)

    # mstx marks under the command line (rows without a device carry the file's Device Id)
    run(tmp_path, "marks.py", MARKS, cli=["--device=cpu", "--events=launch", "--analysis=", "--output=marks_out"])
    marks_csv = the_dump(tmp_path / "marks_out")
    marks = [r for r in read_dump(marks_csv) if r["Event"] == "MSTX"]
    assert [(r["Name"], r["Device Id"]) for r in marks] == [("test", "cpu")] * 4
    before = marks_csv.read_bytes()

    p = run(tmp_path, "offline.py", OFFLINE, args=[marks_csv, train_csv])
    out = p.stdout.splitlines()
    assert out[:4] == ["INFO: Starting to analyze data for device cpu...", "",
                       "Leak Analysis Results for the Custom Range:", "No hal memory leaks detected on device cpu."]
    assert not any("fewer than 3 data points" in l for l in out)
    assert marks_csv.read_bytes() == before  # the leak analysis only reads
    assert out.count(f"INFO: All results have been successfully written to csv {train_csv.name}") == 2
    assert len(read_dump(train_csv)) == len(rows)
