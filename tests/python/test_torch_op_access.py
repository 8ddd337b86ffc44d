"""Operators' tensor reads and writes are collected only where something
uses them (issue #30): decompose implies `access` (upstream's rule, COMPAT
§8) for its owner tags (ACCESS UNKNOWN rows with Attr owner), never for the
per-operator READ/WRITE rows, which it does not read and does not write.
Collecting those cost a PyTorch loop over a third of its time and added the
profiler's own Python allocations to the program's host rows. The capture
says what was collected: each run saves it and a replay writes every ACCESS
row it holds."""
import collections
import csv
import re

import pytest

from conftest import SOURCE, dump_files, process_dirs, run_cli

pytest.importorskip("torch")

LOOP = SOURCE / "tests" / "programs" / "python" / "sgd_keep.py"


def collected(tmp_path, name, analysis):
    """(ACCESS rows by Event Type in the run's capture, decompose's PTA owners table)."""
    run = run_cli(["--device=cpu", f"--analysis={analysis}", "--save-capture=true", f"--output={name}", "--",
                   "/usr/bin/python3", str(LOOP)], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    owners = {m[1]: m[2] for m in re.finditer(r"^  (PTA\S*)\s+(-?\d+\s+-?\d+\s+\d+)$", run.stdout, re.M)}
    (d,) = process_dirs(tmp_path / name)
    (cap,) = d.glob("*.msmcap")
    run_cli([f"--replay={cap}", "--analysis=", "--events=alloc,free,launch,access", f"--output={name}_replay"],
            tmp_path, check_rc=0)
    (r,) = process_dirs(tmp_path / f"{name}_replay")
    with open(dump_files(r)[0], newline="") as f:
        types = collections.Counter(row["Event Type"] for row in csv.DictReader(f) if row["Event"] == "ACCESS")
    return types, owners


def test_decompose_alone_collects_the_owner_tags_not_the_operators_accesses(tmp_path):
    alone, owners = collected(tmp_path, "alone", "decompose")
    assert set(alone) == {"UNKNOWN"} and alone["UNKNOWN"] >= 4, alone  # weight, bias and their gradients
    assert owners["PTA@weight"] and owners["PTA@gradient"], owners
    # with an analyzer that reads them, the operators' accesses are there
    both, owners_both = collected(tmp_path, "with_inefficient", "decompose,inefficient")
    assert both["READ"] > 0 and both["WRITE"] > 0, both
    assert both["UNKNOWN"] == alone["UNKNOWN"]
    # and decompose's answer does not depend on them
    assert owners_both == owners
