"""The analyses on real PyTorch CPU programs, checked against what the
program itself knows (its tensors' data_ptr() and sizes):

* oom: the OOM_RecentAlloc/OOM_TopAlloc rows list blocks. The imports' heap
  (the host blocks Python's imports left, written as one shadow MALLOC with
  Attr import:true at a made-up address, re-written as the imports change) is
  no block: listed, it was the largest "allocation" of every CLI run, at an
  address nothing has, and the most recent one after any import.
"""
import re

import pytest

from conftest import dump_files, process_dirs, read_dump, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}

OOM_SCRIPT = """\
import fractions, decimal
import torch
keep = {i: torch.empty((i + 1) * 100000, dtype=torch.uint8) for i in range(5)}
big = torch.empty(3000000, dtype=torch.uint8)
del keep[2]
small = torch.empty(10, dtype=torch.uint8)
import statistics, json  # the imports' heap changes right before the failure
try:
    torch.empty(1 << 44, dtype=torch.uint8)
except RuntimeError as e:
    print("OOM:", str(e).splitlines()[0])
print("TOP", big.data_ptr(), keep[4].data_ptr(), keep[3].data_ptr())
"""


def test_oom_lists_blocks_not_the_imports_heap(tmp_path):
    (tmp_path / "oom.py").write_text(OOM_SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=oom:3", "--output=out", "--", PY, "oom.py"], tmp_path, env=ENV,
                check_rc=0)
    assert "DefaultCPUAllocator: can't allocate memory" in p.stdout
    [d] = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(d)[0])
    folded = {r["Ptr"] for r in rows if r["Event"] == "MALLOC" and r["attr"].get("import") == "true"}
    assert folded, "the run has an imports' heap block"
    recent = [r["attr"] for r in rows if r["Event"] == "OOM_DETAIL" and r["Event Type"] == "OOM_RECENT_ALLOC"]
    top = [r["attr"] for r in rows if r["Event"] == "OOM_DETAIL" and r["Event Type"] == "OOM_TOP_ALLOC"]
    assert len(recent) == 3 and len(top) == 3
    for a in recent + top:
        assert int(a["ptr"], 16) not in {int(f, 16) for f in folded}, a
    # the three largest live blocks: the program's own tensors, largest first
    want = [int(x) for x in re.search(r"^TOP (\d+) (\d+) (\d+)$", p.stdout, re.M).groups()]
    assert [(int(a["ptr"], 16), int(a["size"]), a["pool"]) for a in top] == \
        [(want[0], 3000000, "PTA"), (want[1], 500000, "PTA"), (want[2], 400000, "PTA")]
