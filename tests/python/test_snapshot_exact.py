"""A SNAPSHOT row's numbers are exact (README, "Snapshot numbers ... mean what
upstream's do (torch's memory_allocated/memory_reserved)": on a device with
framework blocks `allocated` is the tensors' live bytes, never the malloc
under them again): a script holding 1 MiB + 2 MiB of tensors (a third freed)
takes a snapshot under the CLI; `allocated` is exactly the PTA blocks live
before the row, 3 MiB more than at a first snapshot taken before them, and
`reserved` the pool's total, never below `allocated` (issue #29 item 10)."""
import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump, run_cli
from oom_rows_util import MiB, live_framework_bytes

pytest.importorskip("torch")

SCRIPT = '''import torch
import msmemscope

msmemscope.take_snapshot(name="before")
a = torch.ones(1 << 18)  # 1 MiB
b = torch.ones(1 << 19)  # 2 MiB
c = torch.ones(1 << 18)
del c
msmemscope.take_snapshot(name="after")
print("held", a.numel() * 4 + b.numel() * 4)
'''


def test_snapshot_allocated_is_the_live_tensors_bytes(tmp_path):
    (tmp_path / "snap.py").write_text(SCRIPT)
    p = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--output=out", "--",
                 "/usr/bin/python3", "snap.py"], tmp_path, env={"PYTHONPATH": str(BUILD / "python")}, check_rc=0)
    assert f"held {3 * MiB}" in p.stdout
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    rows = read_dump(dump)
    snaps = [r for r in rows if r["Event"] == "SNAPSHOT"]
    assert [s["Name"] for s in snaps] == ["before", "after"], snaps
    before, after = (live_framework_bytes(rows, int(s["ID"])) for s in snaps)
    assert after - before == 3 * MiB
    for s, live in zip(snaps, (before, after)):
        a = s["attr"]
        assert int(a["allocated"]) == live, (a, live)
        assert int(a["max_allocated"]) >= int(a["allocated"]), a
        assert int(a["reserved"]) >= int(a["allocated"]), a
    # the freed third tensor raised the peak: max_allocated saw 4 MiB above 'before'
    assert int(snaps[1]["attr"]["max_allocated"]) >= before + 4 * MiB, snaps[1]["attr"]
