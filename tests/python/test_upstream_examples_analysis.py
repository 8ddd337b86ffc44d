"""Upstream's decomposition and inefficient-memory examples (example/decompose,
example/inefficient: test_*.py run by their test_*.sh), adapted to the CPU
(tests/python/upstream_examples/decompose_api.py, inefficient_api.py). Their
READMEs' "结果说明" show the results in the dump: the owner in each framework
block's Attr (figure decompose_analysis.png: owner:PTA@train), and
inefficient_type on the MALLOC rows of the blocks found (figure
inefficient_analysis.png: early_allocation, late_deallocation)."""
import pytest

from upstream_examples_util import api, only_process, rows_of, upstream_layout

pytest.importorskip("torch")


def test_decompose_example(tmp_path):
    p = api(tmp_path, "decompose_api.py")
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "output"))
    # (the model was built before start(): its blocks are shadow rows, outside the scope)
    inside = [r for r in rows_of(rows, "MALLOC", "PTA") if r["attr"].get("shadow") != "true"]
    assert inside
    owners = [r["attr"].get("owner") for r in inside]
    # every block allocated in the describer's scope is the user's "train", as
    # upstream writes it (PTA@train); the parameters' gradients keep the
    # framework's finer class, which the optimizer step gives them (upstream's
    # user guide: weight, gradient, optimizer_state)
    assert set(owners) <= {"PTA@train", "PTA@gradient"}, set(owners)
    assert owners.count("PTA@train") > len(owners) // 2
    # the owner is written in MALLOC rows only (upstream's figure: FREE rows have none)
    assert not any("owner" in r["attr"] for r in rows_of(rows, "FREE", "PTA"))


def test_inefficient_example(tmp_path):
    p = api(tmp_path, "inefficient_api.py")
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "output"))
    # analysis=inefficient collects the operators and accesses it needs (the
    # dump keeps the events asked for: alloc, free, launch by default)
    assert rows_of(rows, "OP_LAUNCH", "ATEN_START")
    marked = [r for r in rows_of(rows, "MALLOC", "PTA") if "inefficient_type" in r["attr"]]
    assert marked
    kinds = set()
    for r in marked:
        kinds |= set(r["attr"]["inefficient_type"].split(","))
    assert kinds <= {"early_allocation", "late_deallocation", "temporary_idleness"}, kinds
    assert "late_deallocation" in kinds or "early_allocation" in kinds, kinds
