"""End to end: watch on a real PyTorch CPU script (tests/programs/training/
train.py "plant": c = a * b; d = a + 1; c.fill_(7); s = c.sum()). --watch
(CLI), config(watch=...) (python mode) and watcher.watch(), in hash and
full-content mode, write device_cpu/watch_dump (COMPAT §5) and find fill_."""
import re
import struct
import sys

import pytest

from conftest import SOURCE

pytest.importorskip("torch")
sys.path.insert(0, str(SOURCE / "tests" / "programs" / "training"))
sys.path.insert(0, str(SOURCE / "plugins" / "analyzers" / "watch" / "python"))
from harness import proc_dir, run_cli, run_python  # noqa: E402
import msmemscope_watch  # noqa: E402

SPEC = "aten::mul.Tensor,aten::sum"
SEVENS = "%016x" % msmemscope_watch.crc64_py(struct.pack("16f", *([7.0] * 16)))
TWOS = "%016x" % msmemscope_watch.crc64_py(struct.pack("16f", *([2.0] * 16)))


def watch_dir(tmp_path):
    return proc_dir(tmp_path) / "device_cpu" / "watch_dump"


def hashes(tmp_path):
    files = list(watch_dir(tmp_path).glob("watch_dump_data_check_sum_*.csv"))
    assert len(files) == 1, files
    lines = files[0].read_text().splitlines()
    assert lines[0] == "Tensor info,Check data sum"
    rows = [l.rsplit(",", 1) for l in lines[1:]]
    for name, _ in rows:
        assert name.startswith("cpu_") and name.endswith(".bin"), name
    # names without the "cpu_{tid}." prefix
    return [(n.split(".", 1)[1], h) for n, h in rows]


def check_spec_hashes(h, watched):
    names = [n for n, _ in h]
    # the start op's dump is numbered by its call, as upstream's first one (1)
    assert names[0] == f"aten.mul.Tensor_1-{watched}_0_after.bin", names
    assert names[-1] == f"aten.sum_1-{watched}_0_after.bin", names
    d = dict(h)
    assert d[f"aten.mul.Tensor_1-{watched}_0_after.bin"] == TWOS
    assert d[f"aten.fill_.Scalar_1-{watched}_0_before.bin"] == TWOS
    assert d[f"aten.fill_.Scalar_1-{watched}_0_after.bin"] == SEVENS
    assert d[f"aten.add.Tensor_1-{watched}_0_after.bin"] == TWOS


def test_watch_cli_hash_mode(tmp_path):
    p = run_cli(tmp_path, ["--analysis=", f"--watch={SPEC}"], "plant")
    assert "watch: tensor aten::mul.Tensor_0 (made by aten::mul.Tensor_1) was changed by aten::fill_.Scalar_1" in p.stdout, p.stdout + p.stderr
    check_spec_hashes(hashes(tmp_path), "aten.mul.Tensor")


def test_watch_python_mode_full_content(tmp_path):
    p = run_python(tmp_path, {"analysis": "", "watch": SPEC + ",full-content"}, "plant")
    files = sorted(f.name for f in watch_dir(tmp_path).glob("*.bin"))
    assert files, list(watch_dir(tmp_path).iterdir())
    names = {f.split(".", 1)[1]: f for f in files}
    before = watch_dir(tmp_path) / names["aten.fill_.Scalar_1-aten.mul.Tensor_0_before.bin"]
    after = watch_dir(tmp_path) / names["aten.fill_.Scalar_1-aten.mul.Tensor_0_after.bin"]
    assert before.read_bytes() == struct.pack("16f", *([2.0] * 16))
    assert after.read_bytes() == struct.pack("16f", *([7.0] * 16))
    assert "aten.sum_1-aten.mul.Tensor_0_after.bin" in names
    assert not [n for n in files if ":" in n], files
    assert not list(watch_dir(tmp_path).glob("watch_dump_data_check_sum_*.csv"))
    # full-content checkpoints carry the bytes' hash too: the op that changed them is named
    assert "watch: tensor aten::mul.Tensor_0 (made by aten::mul.Tensor_1) was changed by aten::fill_.Scalar_1" in p.stdout, p.stdout + p.stderr


CHANGES = """
import torch
a = torch.ones(4, 4)
b = a.mul(2)               # the watched tensor
b.add_(5)                  # changed by an operator
b.numpy()[0, 0] = 9.0      # changed outside any operator
b.mul_(0.5)                # and again by an operator
print("sum", b.sum().item())
"""


@pytest.mark.parametrize("mode", ["", ",full-content"])
def test_watch_names_every_op_that_changed_the_tensor_and_a_change_outside_operators(tmp_path, mode):
    # Only the first op that changed a tensor was named, none in full-content
    # mode, and a write between operators (numpy(), a C extension) never.
    import subprocess
    from conftest import CLI
    (tmp_path / "prog.py").write_text(CHANGES)
    p = subprocess.run([str(CLI), "--device=cpu", "--analysis=", f"--watch=aten::mul.Tensor:0,aten::sum{mode}",
                        "--output=out", "--", "/usr/bin/python3", "prog.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "sum 57.0" in p.stdout  # (7 * 15 + 9) / 2: the program ran as written
    assert ("watch: tensor aten::mul.Tensor_0 (made by aten::mul.Tensor_1) was changed by aten::add_.Tensor_1 and "
            "aten::mul_.Tensor_1\n") in p.stdout, p.stdout
    assert re.search(r"^watch: tensor aten::mul.Tensor_0 \(made by aten::mul.Tensor_1\) was changed outside the "
                     r"watched operators between \S+ \(after\) and aten::mul_.Tensor_1 \(before\)$", p.stdout, re.M), p.stdout


def test_watcher_watch_python_mode_hash(tmp_path):
    run_python(tmp_path, {"analysis": ""}, "user_watch")
    h = hashes(tmp_path)
    d = dict(h)
    assert d["aten.fill_.Scalar_1-c_0_before.bin"] == TWOS
    assert d["aten.fill_.Scalar_1-c_0_after.bin"] == SEVENS
    assert d["aten.add.Tensor_1-c_0_after.bin"] == TWOS
    assert d["aten.sum_1-c_0_after.bin"] == SEVENS
    # remove() ends the checkpoints: the second sum ran after it
    assert not any(n.startswith("aten.sum_2") for n, _ in h), h


def test_watcher_watch_under_cli_full_content(tmp_path):
    p = run_cli(tmp_path, ["--analysis=", "--watch=aten::fill_.Scalar,full-content"], "user_watch")
    names = {f.name.split(".", 1)[1]: f for f in watch_dir(tmp_path).glob("*.bin")}
    assert names["aten.fill_.Scalar_1-c_0_after.bin"].read_bytes() == struct.pack("16f", *([7.0] * 16))
    assert names["aten.fill_.Scalar_1-c_0_before.bin"].read_bytes() == struct.pack("16f", *([2.0] * 16))
    assert not any(n.startswith("aten.sum") for n in names), names  # after the end op


def test_start_op_wrapping_a_watched_tensor_numbers_before_and_after_alike(tmp_path):
    """fill_ is the start operator and c (watcher.watch) is checkpointed
    around it too: the before and after names of that one call carry the same
    counter (its first call: 1)."""
    run_cli(tmp_path, ["--analysis=", "--watch=aten::fill_.Scalar,aten::sum"], "user_watch")
    d = dict(hashes(tmp_path))
    assert d["aten.fill_.Scalar_1-c_0_before.bin"] == TWOS
    assert d["aten.fill_.Scalar_1-c_0_after.bin"] == SEVENS
    assert d["aten.fill_.Scalar_1-aten.fill_.Scalar_0_after.bin"] == SEVENS
    assert d["aten.sum_1-aten.fill_.Scalar_0_after.bin"] == SEVENS
    assert not [n for n in d if n.startswith("aten.fill_.Scalar_0")], sorted(d)
    # the check-sum file's name as upstream's code makes it (and its smoke
    # test matches it): no device id in the name, the folder has it
    [csv] = watch_dir(tmp_path).glob("watch_dump_data_check_sum_*.csv")
    assert re.fullmatch(r"watch_dump_data_check_sum_\d{1,20}\.csv", csv.name), csv.name


def test_full_content_staging_folders_are_removed(tmp_path, monkeypatch):
    """The target stages full-content dumps in the run's own session folder
    (never in $TMPDIR, issue #29); the host moves each dump into the run
    folder: nothing is left in $TMPDIR, and nothing named msmemscope_watch_*."""
    staging = tmp_path / "tmp"
    staging.mkdir()
    monkeypatch.setenv("TMPDIR", str(staging))
    (tmp_path / "py").mkdir()
    (tmp_path / "cli").mkdir()
    run_python(tmp_path / "py", {"analysis": "", "watch": SPEC + ",full-content"}, "plant")
    run_cli(tmp_path / "cli", ["--analysis=", "--watch=aten::fill_.Scalar,full-content"], "user_watch")
    assert list(watch_dir(tmp_path / "py").glob("*.bin")) and list(watch_dir(tmp_path / "cli").glob("*.bin"))
    assert not [p.name for p in staging.iterdir() if p.name.startswith("msmemscope_watch_")]
