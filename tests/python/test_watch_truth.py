"""--watch on a real training loop whose watched bytes are known
(tests/programs/training/watch_train_truth.py): each start->end window names
the right operators with the right hashes, and a spec that cannot work says
why instead of writing nothing (or everything) in silence: a start operator
that never ran, an output it does not have, an end operator that never ran
(the window stays open to the end of the run)."""
import os
import struct
import subprocess
import sys

import pytest

from conftest import BUILD, SOURCE, process_dirs, run_cli

pytest.importorskip("torch")
sys.path.insert(0, str(SOURCE / "plugins" / "analyzers" / "watch" / "python"))
import msmemscope_watch  # noqa: E402

PROG = SOURCE / "tests" / "programs" / "training" / "watch_train_truth.py"


def run(tmp_path, spec):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=", f"--watch={spec}",
                        "-o", "out", "--", "/usr/bin/python3", str(PROG)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1, dirs
    return p, dirs[0] / "device_cpu" / "watch_dump"


def crc(value):
    return "%016x" % msmemscope_watch.crc64_py(struct.pack("64f", *([value] * 64)))


def rows(folder):
    (f,) = folder.glob("watch_dump_data_check_sum_*.csv")
    lines = f.read_text().splitlines()
    assert lines[0] == "Tensor info,Check data sum"
    return [(n.split(".", 1)[1], h) for n, h in (l.rsplit(",", 1) for l in lines[1:])]


def test_watch_windows_name_the_operators_and_bytes(tmp_path):
    p, folder = run(tmp_path, "aten::addmm,aten::mse_loss")
    want = []
    for s in (1, 2, 3):
        made, doubled = crc(4 * s + 0.25), crc(2 * (4 * s + 0.25))
        want += [(f"aten.addmm_{s}-aten.addmm_0_after.bin", made),
                 (f"aten.mul_.Tensor_{s}-aten.addmm_0_before.bin", made),
                 (f"aten.mul_.Tensor_{s}-aten.addmm_0_after.bin", doubled),
                 (f"aten.mse_loss_{s}-aten.addmm_0_before.bin", doubled),
                 (f"aten.mse_loss_{s}-aten.addmm_0_after.bin", doubled)]
    assert rows(folder) == want
    assert "watch: 15 checkpoint(s) written under device_*/watch_dump" in p.stdout, p.stdout
    # each window's tensor is another one (each step's addmm output): a line
    # each, never one tensor changed three times
    assert [l for l in p.stdout.splitlines() if l.startswith("watch: tensor")] == [
        f"watch: tensor aten::addmm_0 (made by aten::addmm_{s}) was changed by aten::mul_.Tensor_{s}" for s in (1, 2, 3)
    ], p.stdout
    assert "warning: watch:" not in p.stderr, p.stderr

    # --analyze=watch of the run's dump writes the hashes again, into
    # --output (memscopeDumpResults unless given), and says so: no run
    # folder's files are listed after its lines (before: "under
    # device_*/watch_dump", a folder of no run)
    (dump,) = (folder.parent / "dump").glob("memscope_dump_*.csv")
    off = run_cli(["--analyze=watch", f"--input={dump}"], tmp_path, check_rc=0)
    assert "watch: 15 checkpoint(s) written under memscopeDumpResults/device_*/watch_dump" in off.stdout.splitlines()
    assert rows(tmp_path / "memscopeDumpResults" / "device_cpu" / "watch_dump") == want


def test_watch_start_operator_that_never_ran(tmp_path):
    p, folder = run(tmp_path, "aten::adm,aten::mse_loss")
    assert not folder.exists()
    # the operator calls it counts are the dump's operator rows
    (dump,) = (folder.parent / "dump").glob("memscope_dump_*.csv")
    calls = sum(1 for l in dump.read_text().splitlines() if ",OP_LAUNCH,ATEN_START," in l)
    assert calls > 50
    assert ("[msmemscope] warning: watch: --watch=aten::adm,aten::mse_loss wrote no checkpoint: its start operator "
            f"aten::adm never ran in this process ({calls} operator call(s) ran; names as aten::mul, aten::mul.Tensor "
            "or torch._ops.aten.mul.Tensor)") in p.stderr, p.stderr


def test_watch_start_operator_without_that_output(tmp_path):
    p, folder = run(tmp_path, "aten::addmm:1,aten::mse_loss")
    assert not folder.exists()
    assert ("[msmemscope] warning: watch: --watch=aten::addmm:out1,aten::mse_loss wrote no checkpoint: its start "
            "operator aten::addmm ran 3 time(s) but gave no output 1 that is a CPU tensor") in p.stderr, p.stderr


def test_watch_end_operator_that_never_ran(tmp_path):
    p, folder = run(tmp_path, "aten::addmm,aten::mse_los")
    n = len(rows(folder))
    assert f"watch: {n} checkpoint(s) written under device_*/watch_dump" in p.stdout, p.stdout
    assert ("[msmemscope] warning: watch: --watch=aten::addmm,aten::mse_los: the window opened by aten::addmm_1 was "
            "still open at the end: its end operator aten::mse_los never ran in this process, so every operator "
            f"after it was checkpointed ({n} checkpoint(s))") in p.stderr, p.stderr
