"""Operator rows carry only what upstream's collection names (issue #28 item
8): upstream's dispatch-mode collection writes ATEN_START/ATEN_END with Name
torch._ops.aten.<op>.<overload>; autograd's engine ranges
('autograd::engine::evaluate_function: AddmmBackward0') and other records
without a schema write no row, while the operators the backward pass runs
inside them do.
"""
import re

import pytest

from conftest import SOURCE, dump_files, process_dirs, run_cli

pytest.importorskip("torch")
PROG = SOURCE / "tests" / "programs" / "python" / "launch" / "torch_prog.py"
UPSTREAM_NAME = re.compile(r"torch\._ops\.[a-z_][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def test_operator_rows_are_upstreams_names_only(tmp_path):
    p = run_cli(["--device=cpu", "--events=launch", "--analysis=", "--output=out", "--", "/usr/bin/python3", PROG],
                tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    assert "loss" in p.stdout
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    starts, ends = [], []
    with open(dump) as f:
        for line in f:
            cols = line.split(",")
            if len(cols) > 3 and cols[1] == "OP_LAUNCH":
                (starts if cols[2] == "ATEN_START" else ends).append(cols[3])
    bad = sorted({n for n in starts + ends if not UPSTREAM_NAME.fullmatch(n)})
    assert bad == [], bad
    assert sorted(starts) == sorted(ends)
    # the forward and the backward pass's own operators are there
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.relu.default",
            "torch._ops.aten.threshold_backward.default", "torch._ops.aten.mm.default"} <= set(starts), set(starts)
