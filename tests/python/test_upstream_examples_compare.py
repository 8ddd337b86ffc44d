"""Upstream's step comparison (docs/zh/best_practices §2; example/compare/README.md),
adapted to the CPU (tests/python/upstream_examples/compare_train.py): the
same training script collected twice under
`msmemscope --events=alloc,free --level=kernel --steps=N --output-path=./output/stepN`
(N = 2 and 5), then `msmemscope --compare --input-path=./output/step2,./output/step5
--level=kernel`: the result, memory_compare_{timestamp}.csv under
memscopeDumpResults/.../compare/, shows the allocation step 5 has and step 2
has not ("对比报告中会显示两个 Step 之间新增或减少的内存分配记录")."""
import csv

import pytest

from upstream_examples_util import PY, cli, run, CLI

pytest.importorskip("torch")

EXTRA = 4096 * 4  # bytes of the step-5-only buffer


def test_compare_two_steps(tmp_path):
    for n in (2, 5):
        p = cli(tmp_path, ["--device=cpu", "--events=alloc,free", "--level=kernel", f"--steps={n}",
                           f"--output-path=./output/step{n}"], [PY, "compare_train.py"])
        assert "Test finished." in p.stdout.splitlines()
    p = run([CLI, "--compare", "--input-path=./output/step2,./output/step5", "--level=kernel"], tmp_path)
    found = sorted((tmp_path / "memscopeDumpResults").rglob("memory_compare_*.csv"))
    assert len(found) == 1, sorted(str(x) for x in (tmp_path / "memscopeDumpResults").rglob("*"))
    assert found[0].parent.name == "compare"
    lines = found[0].read_text().splitlines()
    assert lines[0] == ",,,Base,Compare"
    assert lines[1] == "Event,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)"
    rows = list(csv.reader(lines[2:]))
    assert rows, lines
    # Exactly one row per (event, name, device): the CPU has no kernel launches, so the
    # kernel-level rows are the steps' allocations by pool with no stack ("(no stack)").
    assert sorted((r[0], r[1], r[2]) for r in rows) == [
        ("MALLOC", "(no stack) HOST", "cpu"), ("MALLOC", "(no stack) PTA", "cpu")], rows
    for r in rows:
        assert int(r[5]) == int(r[4]) - int(r[3]), r
    pta = next(r for r in rows if r[1] == "(no stack) PTA")
    # Step 5 makes the buffer once on the counted side of its optimizer step (the other
    # call falls in step 6): one buffer more than step 2, not two, not none.
    assert EXTRA <= int(pta[5]) < 2 * EXTRA, rows
