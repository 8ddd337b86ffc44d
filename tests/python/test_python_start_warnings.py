"""Issue #27 item 8: msmemscope.start() warns about nothing of torch's.

start() finds the CPU tensors that exist already (their storages become
shadow MALLOC rows) by scanning the garbage collector's objects. An
isinstance() test on every object read each one's __class__ through its own
__getattribute__, and torch.distributed.reduce_op answers any attribute read
with "torch.distributed.reduce_op is deprecated". The tensors made before
start() must still be found."""
import os
import subprocess

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = r'''
import sys, warnings
import torch
import torch.distributed  # holds reduce_op, the object that warns when read
import msmemscope

weight = torch.nn.Parameter(torch.ones(1000))   # 4000 bytes, a Tensor subclass
plain = torch.ones(3000)                         # 12000 bytes
msmemscope.config(device="cpu", output="out", analysis="")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    msmemscope.start()
msmemscope.stop()
for w in caught:
    print("WARNING:", w.category.__name__, w.message, file=sys.stderr)
print("warnings from start():", len(caught))
'''


def test_start_raises_no_torch_warning_and_still_finds_tensors(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, "-W", "always", "prog.py"], cwd=str(tmp_path), env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert "deprecated" not in p.stderr, p.stderr
    assert "warnings from start(): 0" in p.stdout, p.stdout + p.stderr
    # The tensors made before start() are still shadow rows of their sizes.
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1, dirs
    rows = read_dump(dump_files(dirs[0])[0])
    shadow = sorted(int(r["attr"]["size"]) for r in rows
                    if r["Event"] == "MALLOC" and r["attr"].get("shadow") == "true"
                    and r["attr"].get("size") in ("4000", "12000"))
    assert shadow == [4000, 12000], [r for r in rows if r["attr"].get("shadow") == "true"][:20]
