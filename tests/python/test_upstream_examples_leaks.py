"""Upstream's leak example (example/leaks/README.md, python/test_leaks.py),
adapted to the CPU (tests/python/upstream_examples/leaks_api.py): the README's
"结果说明" says a framework-pool leak within steps is printed on the console
(its figure leaks_analysis.png: the ERROR line, one `Direct ... leak` line per
kept tensor from step 2 on, the SUMMARY, then the pool's Gap Analysis), with
the leak report's lines at column 0."""
import re

import pytest

from upstream_examples_util import api, only_process, rows_of, upstream_layout

pytest.importorskip("torch")

KEPT = 1000 * 1000 * 4  # bytes of the tensor kept per epoch


def check_upstream_leak_report(stdout):
    lines = stdout.splitlines()
    i = lines.index("====== ERROR: Detected memory leaks on device cpu ======")
    direct = []
    for line in lines[i + 1:]:
        m = re.fullmatch(r"Direct Pytorch Caching memory pool leak of (\d+\.\d{6}) Mb\(s\) at 0x([0-9a-f]+) "
                         r"in kernel_(\d+) at step (\d+)\.", line)
        if not m:
            break
        direct.append(m)
    # six epochs, one kept tensor each: steps 0 and 1 are warm-up and the last
    # one has not outlived a step yet, so steps 2..5 (upstream's figure: 4 leaks)
    assert [int(m.group(4)) for m in direct] == [2, 3, 4, 5], lines[i:i + 8]
    assert {m.group(1) for m in direct} == {f"{KEPT / 2 ** 20:f}"}
    j = i + 1 + len(direct)
    assert lines[j] == f"====== SUMMARY: {4 * KEPT / 2 ** 20:.6g} Mb(s) leaked in 4 allocation(s) ======"
    assert lines[j + 1] == "======= Pytorch Caching memory pool Gap Analysis of Device cpu ======="
    assert lines[j + 2] == "\t" + "".join(f"{h:<25}" for h in ("MinAlloc/MaxAlloc(%)", "MinAllocMem(MB)", "StepId"))
    for k, label in ((3, "MinGap"), (4, "MaxGap")):
        assert re.fullmatch(label + r"\t\d+\.\d{4} +\d+\.\d{4} +\d+ +", lines[j + k]), lines[j + k]
    # upstream's lines all start at column 0, as `grep '^======'` expects
    assert len(re.findall(r"^======", stdout, re.M)) == 3
    return [int(m.group(2), 16) for m in direct]


def test_leaks_python_api(tmp_path):
    p = api(tmp_path, "leaks_api.py")
    assert "Test finished." in p.stdout.splitlines()
    ptrs = check_upstream_leak_report(p.stdout)
    rows = upstream_layout(only_process(tmp_path / "output"))
    # the leaked blocks are the kept tensors' MALLOC rows, one per step
    kept = {int(r["Ptr"], 16) for r in rows_of(rows, "MALLOC", "PTA") if r["attr"]["size"] == str(KEPT)}
    assert set(ptrs) <= kept and len(kept) == 6
    assert [r["Name"] for r in rows_of(rows, "SYSTEM", "STEP")] == [str(i) for i in range(1, 7)]
