"""--steps and the oom analysis: a block allocated in a step not selected and
still live when a selected one fails is carried into it by a shadow MALLOC
(framework/host/step_gap.h). OOM_TopAlloc said it was allocated in the
selected step at the shadow row's time (the model's weights "step 3" in a
--steps=3 run): it says the step and time of its real MALLOC, as the full
run does."""
import subprocess
import textwrap

import pytest

from conftest import CLI, clean_env, dump_files, process_dirs, read_dump

pytest.importorskip("torch")

PROGRAM = """
import torch, msmemscope
weights = torch.ones(1 << 18)        # 1 MiB, before the first step() (upstream: step 0)
msmemscope.step()
state = torch.ones(1 << 17)          # 512 KiB, in step 2
msmemscope.step()
batch = torch.ones(3 << 15)          # 384 KiB, in step 3
try:
    torch.empty(1 << 50, dtype=torch.uint8)
    print("no failure")
except RuntimeError:
    print("allocation failed")
"""


def run(tmp_path, steps):
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    cmd = [str(CLI), "--device=cpu", "--events=alloc,free", "--analysis=oom:3", "--output=out",
           *([f"--steps={steps}"] if steps else []), "--", "/usr/bin/python3", "prog.py"]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "allocation failed" in p.stdout.splitlines()
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d)
    return read_dump(dump)


def top_allocs(rows):
    """size -> the tensors' OOM_TopAlloc row's (step, timestamp), and the
    PTA MALLOC rows of those sizes (the shadow's or the real one)."""
    top = {int(r["attr"]["size"]): (r["attr"]["step"], int(r["attr"]["timestamp"]))
           for r in rows if r["Event"] == "OOM_DETAIL" and r["Event Type"] == "OOM_TOP_ALLOC"
           and r["attr"]["pool"] == "PTA"}
    mallocs = {int(r["attr"]["size"]): r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"
               and int(r["attr"]["size"]) in top}
    return top, mallocs


def test_a_block_carried_over_from_a_dropped_step_is_listed_with_its_own_step_and_time(tmp_path):
    for d in ("full", "steps"):
        (tmp_path / d).mkdir()
    full, _ = top_allocs(run(tmp_path / "full", None))
    rows = run(tmp_path / "steps", "3")
    got, mallocs = top_allocs(rows)
    sizes = [1 << 20, 1 << 19, 3 << 17]
    assert sorted(full, reverse=True) == sizes and sorted(got, reverse=True) == sizes, (full, got)
    # the same steps as the full run: 0 (before the first step()), 2, 3
    assert {s: full[s][0] for s in sizes} == {1 << 20: "0", 1 << 19: "2", 3 << 17: "3"}
    assert {s: got[s][0] for s in sizes} == {s: full[s][0] for s in sizes}
    # the weights and the state reach the --steps dump as shadow rows (at
    # step 3's start), the time they were listed with is their MALLOC's:
    # before the STEP rows that ended their steps
    marks = [int(r["Timestamp(ns)"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert len(marks) == 2
    for size, before in ((1 << 20, marks[0]), (1 << 19, marks[1])):
        m = mallocs[size]
        assert m["attr"].get("shadow") == "true" and int(m["Timestamp(ns)"]) >= marks[1], m
        assert got[size][1] == int(m["attr"]["allocated_at"]) < before, (size, got[size], marks)
    # the block of the selected step, as it was
    assert got[3 << 17][1] == int(mallocs[3 << 17]["Timestamp(ns)"]) > marks[1]
