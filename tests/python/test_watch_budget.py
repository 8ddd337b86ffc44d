"""watcher.watch(dump_nums=N) on a real PyTorch script
(tests/programs/training/watch_budget.py: five w.add_ calls, dump_nums=3):
when the budget runs out the report and the watch_dump folder say so (how
many checkpoints, the last one, the first one not taken) instead of a list
of changes that reads as complete ("changed by add_ 1" when five adds
changed it)."""
import struct
import subprocess
import sys

import pytest

from conftest import BUILD, SOURCE

pytest.importorskip("torch")
sys.path.insert(0, str(SOURCE / "tests" / "programs" / "training"))
sys.path.insert(0, str(SOURCE / "plugins" / "analyzers" / "watch" / "python"))
from harness import PY, env, proc_dir  # noqa: E402
import msmemscope_watch  # noqa: E402

SCRIPT = SOURCE / "tests" / "programs" / "training" / "watch_budget.py"
CHANGED = "watch: tensor w_0 was changed by aten::add_.Tensor_1"
BUDGET = ("tensor w_0: its checkpoint budget ran out (dump_nums=3): 3 checkpoint(s), the last at "
          "aten::add_.Tensor_2 (before); not checked from aten::add_.Tensor_2 (after) on, so later changes are "
          "not reported")


def crc(value):
    return "%016x" % msmemscope_watch.crc64_py(struct.pack("16f", *([value] * 16)))


def run(tmp_path, cli_options=None, cfg="{}"):
    if cli_options is None:
        cmd = [PY, str(SCRIPT), cfg]
    else:
        cmd = [str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--output=out", "--collect-mode=deferred",
               "--analysis="] + cli_options + ["--", PY, str(SCRIPT), "{}"]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "w 5.0" in p.stdout.splitlines(), p.stdout
    return p


def folder(tmp_path):
    return proc_dir(tmp_path) / "device_cpu" / "watch_dump"


def budget_file(tmp_path):
    files = list(folder(tmp_path).glob("watch_dump_budget_used_up_*.txt"))
    assert len(files) == 1, sorted(f.name for f in folder(tmp_path).iterdir())
    return files[0].read_text()


def watch_lines(p):
    return [l for l in p.stdout.splitlines() if l.startswith("watch: tensor")]


def test_budget_used_up_under_the_cli(tmp_path):
    p = run(tmp_path, [])
    # what was checked is written as before: three checkpoints
    (csv,) = folder(tmp_path).glob("watch_dump_data_check_sum_*.csv")
    rows = [l.rsplit(",", 1) for l in csv.read_text().splitlines()[1:]]
    assert [(n.split(".", 1)[1], h) for n, h in rows] == [
        ("aten.add_.Tensor_1-w_0_before.bin", crc(0.0)),
        ("aten.add_.Tensor_1-w_0_after.bin", crc(1.0)),
        ("aten.add_.Tensor_2-w_0_before.bin", crc(1.0))]
    assert "watch: 3 checkpoint(s) written under device_*/watch_dump" in p.stdout, p.stdout
    # and the report says where checking stopped, beside the one change seen
    assert watch_lines(p) == [CHANGED, "watch: " + BUDGET], p.stdout
    assert budget_file(tmp_path) == BUDGET + "\n"


def test_budget_used_up_full_content(tmp_path):
    p = run(tmp_path, ["--watch=aten::nosuch,full-content"])
    names = sorted(f.name.split(".", 1)[1] for f in folder(tmp_path).glob("*.bin"))
    assert names == ["aten.add_.Tensor_1-w_0_after.bin", "aten.add_.Tensor_1-w_0_before.bin",
                     "aten.add_.Tensor_2-w_0_before.bin"], names
    assert watch_lines(p) == [CHANGED, "watch: " + BUDGET], p.stdout
    assert budget_file(tmp_path) == BUDGET + "\n"


def test_budget_used_up_python_api(tmp_path):
    p = run(tmp_path, cfg='{"device": "cpu", "output": "out", "analysis": ""}')
    assert watch_lines(p) == [CHANGED, "watch: " + BUDGET], p.stdout
    assert budget_file(tmp_path) == BUDGET + "\n"


def test_budget_not_used_up_says_nothing_more(tmp_path):
    """A budget the script does not reach: every add is named, no budget line
    and no budget file."""
    script = tmp_path / "big_budget.py"
    script.write_text(SCRIPT.read_text().replace("dump_nums=3", "dump_nums=100"))
    p = subprocess.run([PY, str(script), '{"device": "cpu", "output": "out", "analysis": ""}'], cwd=str(tmp_path),
                       env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert watch_lines(p) == ["watch: tensor w_0 was changed by " + ", ".join(
        f"aten::add_.Tensor_{i}" for i in range(1, 5)) + " and aten::add_.Tensor_5"], p.stdout
    assert not list(folder(tmp_path).glob("watch_dump_budget_used_up_*.txt"))


REWATCH = """\
import torch
import msmemscope
msmemscope.config(device="cpu", output="out", analysis="")
msmemscope.start()
w = torch.zeros(16)
msmemscope.watcher.watch(w, name="w", dump_nums=2)
w.add_(1.0)
w.add_(1.0)                           # past the first budget
msmemscope.watcher.remove(w)
msmemscope.watcher.watch(w, name="w", dump_nums=2)
w.mul_(2.0)
w.mul_(2.0)                           # past the second one
msmemscope.watcher.remove(w)
msmemscope.stop()
"""


def test_watched_again_each_budget_has_its_line(tmp_path):
    script = tmp_path / "rewatch.py"
    script.write_text(REWATCH)
    p = subprocess.run([PY, str(script)], cwd=str(tmp_path), env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    gap1 = ("tensor w_0: its checkpoint budget ran out (dump_nums=2): 2 checkpoint(s), the last at "
            "aten::add_.Tensor_1 (after); not checked from aten::add_.Tensor_2 (before) until it was watched again "
            "at aten::mul_.Tensor_1 (before), where its bytes had changed: the operators in between are not reported")
    gap2 = ("tensor w_0: its checkpoint budget ran out (dump_nums=2): 2 checkpoint(s), the last at "
            "aten::mul_.Tensor_1 (after); not checked from aten::mul_.Tensor_2 (before) on, so later changes are not "
            "reported")
    # add_ 2 changed w unseen: said on the gap's line, never as a change
    # "outside the watched operators"
    assert watch_lines(p) == ["watch: tensor w_0 was changed by aten::add_.Tensor_1 and aten::mul_.Tensor_1",
                              "watch: " + gap1, "watch: " + gap2], p.stdout
    assert budget_file(tmp_path) == gap1 + "\n" + gap2 + "\n"
