"""End to end: a real PyTorch CPU training loop (tests/programs/training/
train.py: Linear + ReLU + Linear, Adam, 8 steps) under the CLI and in plain
python mode, through leaks, decompose, inefficient, --steps and the offline
check functions (CSV and DB write-back)."""
import re
import sqlite3
import sys

import pytest

from conftest import SOURCE

pytest.importorskip("torch")
sys.path.insert(0, str(SOURCE / "tests" / "programs" / "training"))
from harness import proc_dir, rows_of, run_cli, run_py_json, run_python  # noqa: E402

KEPT = 4096 * 4  # bytes of the tensor train.py keeps per step


def pta_leak_lines(text):
    return [l.strip() for l in text.splitlines() if l.strip().startswith("Direct Pytorch Caching memory pool leak")]


def test_leaks_reports_the_kept_tensor_of_each_step(tmp_path):
    p = run_cli(tmp_path, ["--analysis=leaks"], "keep")
    lines = pta_leak_lines(p.stdout)
    # a tensor kept in step S has lived a whole step at the end of S+1; steps 0-1
    # are warm-up and the last step's tensor never lives a whole step
    assert [l.split(" at step ")[1] for l in lines] == [f"{s}." for s in range(2, 8)], p.stdout
    for l in lines:
        assert l.startswith(f"Direct Pytorch Caching memory pool leak of {KEPT / 1048576:f} Mb(s) at 0x"), l
    rows, _ = rows_of(tmp_path)
    kept = {r["Ptr"] for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"
            and r["attr"]["size"] == str(KEPT)}
    assert {"0x%016x" % int(l.split(" at ")[1].split(" ")[0], 16) for l in lines} <= kept


def test_leaks_reports_nothing_without_the_kept_tensors(tmp_path):
    p = run_cli(tmp_path, ["--analysis=leaks"])
    assert pta_leak_lines(p.stdout) == [], p.stdout


def check_owners(rows, report):
    mallocs = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]
    owners = {r["attr"]["owner"] for r in mallocs}
    assert {"PTA@weight", "PTA@gradient", "PTA@optimizer_state", "PTA@ops@aten", "PTA@cache"} <= owners, owners
    for o in owners:
        assert o == "PTA" or (o.startswith("PTA@") and "PTA@PTA" not in o and "@@" not in o), o
    # each MALLOC row has one owner entry
    for r in mallocs:
        assert r["Attr"].count("owner:") == 1, r["Attr"]
    # the weights were allocated in the describer scope "model" and relabelled
    # once registered as parameters (or at their module's first forward, or
    # the optimizer step): the MALLOC row shows the final owner
    tagged = {}
    for r in rows:
        if r["Event"] == "ACCESS" and r["Event Type"] == "UNKNOWN" and r["Name"] in (
                "module.register", "module.forward", "optimizer.step"):
            tagged.setdefault(r["Ptr"], r["attr"]["owner"])
    by_ptr = {}
    for r in mallocs:
        by_ptr[r["Ptr"]] = r
    weights = [p for p, o in tagged.items() if o == "PTA@weight"]
    assert len(weights) == 4, tagged
    for p in weights:
        assert by_ptr[p]["attr"]["owner"] == "PTA@weight", by_ptr[p]
    table = [l.split() for l in report.splitlines() if l.strip().startswith("PTA")]
    names = {t[0] for t in table}
    assert {"PTA@weight", "PTA@gradient", "PTA@optimizer_state", "PTA@ops@aten", "PTA@cache"} <= names, report
    weight = [t for t in table if t[0] == "PTA@weight"][0]
    # Linear(16,32) + Linear(32,4): (512 + 32 + 128 + 4) floats
    assert int(weight[1]) == 676 * 4, report
    cache = [t for t in table if t[0] == "PTA@cache"][0]
    assert int(cache[1]) == 2048 * 4, report


def test_decompose_owner_table_cli(tmp_path):
    # ACCESS rows are written only when --events lists access (msMemScope's dump filter)
    p = run_cli(tmp_path, ["--analysis=decompose", "--events=alloc,free,launch,access"])
    assert "decompose: memory by owner on device cpu:" in p.stdout.splitlines()
    rows, _ = rows_of(tmp_path)
    check_owners(rows, p.stdout)


def test_decompose_owner_table_python_mode(tmp_path):
    p = run_python(tmp_path, {"analysis": "decompose", "events": "alloc,free,launch,access"})
    rows, _ = rows_of(tmp_path)
    report = (proc_dir(tmp_path) / "msmemscope_logs").glob("*.log")
    text = p.stdout + p.stderr + "".join(f.read_text() for f in report)
    check_owners(rows, text)


def test_access_rows_carry_the_allocation_id_of_their_block(tmp_path):
    run_cli(tmp_path, ["--analysis=", "--events=alloc,free,launch,access"])
    rows, _ = rows_of(tmp_path)
    live = {}
    checked = 0
    for r in rows:
        if r["Event Type"] != "PTA" and r["Event"] in ("MALLOC", "FREE"):
            continue
        if r["Event"] == "MALLOC":
            live[r["Ptr"]] = r["attr"]["allocation_id"]
        elif r["Event"] == "FREE":
            live.pop(r["Ptr"], None)
        elif r["Event"] == "ACCESS" and r["Event Type"] in ("READ", "WRITE") and r["Ptr"] in live:
            assert r["attr"].get("allocation_id") == live[r["Ptr"]], r
            checked += 1
    assert checked > 100


def early_block(p, rows):
    ptr = "0x%016x" % int([l for l in p.stdout.splitlines() if l.startswith("early ")][0].split()[1], 16)
    m = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA" and r["Ptr"] == ptr]
    return m[-1]


def test_inefficient_marks_the_early_allocation(tmp_path):
    p = run_cli(tmp_path, ["--analysis=inefficient"], "early")
    rows, _ = rows_of(tmp_path)
    assert early_block(p, rows)["attr"]["inefficient_type"] == "early_allocation"


def test_steps_keeps_only_those_steps_and_turns_leaks_off(tmp_path):
    p = run_cli(tmp_path, ["--analysis=leaks", "--steps=3,4"], "keep")
    assert "leaks: the leak analysis is off when --steps selects steps" in p.stderr + p.stdout
    assert pta_leak_lines(p.stdout) == []
    rows, _ = rows_of(tmp_path)
    step_at = {r["Name"]: i for i, r in enumerate(rows) if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"}
    assert sorted(step_at, key=int) == [str(i) for i in range(1, 9)]
    # (shadow FREEs of blocks still live at the end are written after the last step)
    others = [i for i, r in enumerate(rows) if r["Event"] != "SYSTEM" and r["attr"].get("shadow") != "true"]
    assert others, "no rows of steps 3 and 4"
    assert all(step_at["2"] < i < step_at["4"] for i in others), [rows[i] for i in others[:3]]
    # both steps have rows
    assert any(step_at["2"] < i < step_at["3"] for i in others)
    assert any(step_at["3"] < i < step_at["4"] for i in others)
    assert "--steps:" not in p.stderr


def test_steps_never_reached_are_named(tmp_path):
    # --steps=20 on a run of 8 steps collected nothing and said nothing.
    p = run_cli(tmp_path, ["--analysis=", "--steps=4,20,30"], "keep")
    (line,) = [l for l in p.stderr.splitlines() if "--steps:" in l]
    assert re.fullmatch(r"msmemscope: warning: pid \d+: --steps: steps 20, 30 were never reached \(its last step was "
                        r"9\); nothing was collected for them", line), line
    (tmp_path / "b").mkdir()
    p = run_cli(tmp_path / "b", ["--analysis=", "--steps=20"], "keep")
    assert re.search(r"^msmemscope: warning: pid \d+: --steps: step 20 was never reached \(its last step was 9\); "
                     r"nothing was collected for it$", p.stderr, re.M), p.stderr


OFFLINE = """
import sys, warnings, msmemscope
warnings.simplefilter("error")  # a dump with accesses: no word of nothing to judge
assert msmemscope.check_inefficient(sys.argv[1]) is None
if sys.argv[1].endswith(".csv"):  # upstream's check_leaks reads only CSV
    assert msmemscope.check_leaks(sys.argv[1], "step", 0) is None
"""


def test_offline_checks_on_a_real_csv_dump(tmp_path):
    p = run_cli(tmp_path, ["--analysis=", "--events=alloc,free,launch,access"], "early")
    rows, path = rows_of(tmp_path)
    assert "inefficient_type" not in early_block(p, rows)["attr"]
    out = run_py_json(OFFLINE, path)
    assert f"INFO: All results have been successfully written to csv {path.name}" in out, out
    assert "INFO: Starting to analyze data for device cpu..." in out, out
    rows2, _ = rows_of(tmp_path)
    assert early_block(p, rows2)["attr"]["inefficient_type"] == "early_allocation"
    assert len(rows2) == len(rows)


def test_offline_checks_on_a_real_db_dump(tmp_path):
    p = run_cli(tmp_path, ["--analysis=", "--events=alloc,free,launch,access", "--data-format=db"], "early")
    dbs = list((proc_dir(tmp_path) / "device_cpu" / "dump").glob("memscope_dump_*.db"))
    assert len(dbs) == 1, dbs
    ptr = "0x%016x" % int([l for l in p.stdout.splitlines() if l.startswith("early ")][0].split()[1], 16)

    def attr_of():
        with sqlite3.connect(str(dbs[0])) as c:
            got = c.execute('SELECT "Attr" FROM memscope_dump WHERE "Event"=\'MALLOC\' AND "Event Type"=\'PTA\' '
                            'AND "Ptr"=? ORDER BY "ID" DESC LIMIT 1', (ptr,)).fetchall()
        assert got, ptr
        return got[0][0]

    assert "inefficient_type" not in attr_of()
    out = run_py_json(OFFLINE, dbs[0])
    assert f"INFO: All results have been successfully written to database {dbs[0].name}" in out, out
    a = attr_of()
    import json
    assert json.loads(a)["inefficient_type"] == "early_allocation", a
