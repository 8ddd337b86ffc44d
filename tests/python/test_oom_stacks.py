"""An allocation that fails for lack of memory gets its C and Python call
stacks whatever --call-stack says, as upstream takes them (csrc/event_trace/
hal_hooks/hal_hooks.cpp HandleOOM: "at OOM take the C and Python call
stacks directly, not depending on the config", DEFAULT_CALL_STACK_DEPTH 50
frames). Without --call-stack:

* a C program whose malloc fails under RLIMIT_AS
  (tests/programs/analyzers/oom.c): the OOM_Trigger and OOM_Snapshot
  rows' C stack starts at the program's function that called malloc, at its
  source line; so do the html report's failure, the trace's mark of it and
  the db's rows;
* a PyTorch script asking for a tensor larger than its RLIMIT_AS leaves,
  under the CLI, and one using the Python API alone
  (tests/programs/python/oom_cpu.py): the rows' Python stack names the
  script's line (not the package's own frames);

while every other row keeps what --call-stack asks for: no stacks without
it, its depth with it.
"""
import json
import re
import sqlite3

import pytest

from conftest import SOURCE, TEST_BIN, dump_files, process_dirs, read_dump, run_cli
from oom_rows_util import SCRIPT as API_SCRIPT, run as api_run
from sinks_common import load_trace, only
from test_html_oom import ENV, PY, TORCH_SCRIPT, merged_stack, oom_rows
from test_html_truth import page_data

C_SOURCE = SOURCE / "tests" / "programs" / "analyzers" / "oom.c"
MALLOC_LINE = 1 + C_SOURCE.read_text().splitlines().index("    void* p = malloc(n);")


def native(tmp_path, *opts):
    p = run_cli(["--device=cpu", *opts, "--output=out", "--", TEST_BIN / "analyzers_oom"], tmp_path,
                check_rc=3)
    assert "malloc failed as expected" in p.stdout
    d = only(process_dirs(tmp_path / "out"))
    return p, d


def failing_call_stack(c_stack):
    """The C stack of the failing malloc: the program's function at the call's line, then main."""
    frames = c_stack.splitlines()
    assert re.fullmatch(r"ask_for_too_much\+0x[0-9a-f]+ at \S*/oom\.c:%d in \S*/analyzers_oom" % MALLOC_LINE,
                        frames[0]), c_stack
    assert frames[1].startswith("main+0x"), c_stack
    assert len(frames) <= 50, c_stack
    return frames


def nothing_asked_for(r):
    """No stack but those taken whatever was asked for (README: a CPython
    start-up's or a loader's block, their last line says so)."""
    c = r["Call Stack(C)"]
    last = c.splitlines()[-1] if c else ""
    return r["Call Stack(Python)"] == "" and (c == "" or re.fullmatch(r"\[.*: a C stack taken without .*\]", last))


def heap_rows(rows):
    rows = [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "HOST"]
    assert len([r for r in rows if r["Event"] == "MALLOC"]) >= 4
    return rows


@pytest.fixture(scope="module")
def native_oom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native_oom_stack")
    p, d = native(tmp, "--analysis=oom:2", "--sinks=csv,html,trace")
    return tmp, p, d, read_dump(only(dump_files(d)))


def test_failure_rows_carry_the_c_stack_without_call_stack(native_oom):
    tmp, p, d, rows = native_oom
    [trig], [snap] = oom_rows(rows, "OOM_TRIGGER"), oom_rows(rows, "OOM_Snapshot")
    failing_call_stack(trig["Call Stack(C)"])
    assert trig["Call Stack(Python)"] == ""  # a C program: no Python stack
    assert (snap["Call Stack(C)"], snap["Call Stack(Python)"]) == (trig["Call Stack(C)"], "")
    # the blocks the oom analysis lists have no stack: none was asked for when they were made
    for r in oom_rows(rows, "OOM_TOP_ALLOC") + oom_rows(rows, "OOM_RECENT_ALLOC"):
        assert nothing_asked_for(r), r


def test_other_rows_keep_no_stack_without_call_stack(native_oom):
    tmp, p, d, rows = native_oom
    for r in heap_rows(rows):
        assert nothing_asked_for(r), r


def test_the_page_and_the_trace_show_the_failures_stack(native_oom):
    tmp, p, d, rows = native_oom
    [trig] = oom_rows(rows, "OOM_TRIGGER")
    [f] = page_data(only(d.glob("report_*.html")))["oom"]["listed"]
    assert f["stack"] == merged_stack(trig) == trig["Call Stack(C)"]
    failing_call_stack(f["stack"])
    marks = [e for e in load_trace(only(d.glob("trace_*.json")))["traceEvents"]
             if e.get("cat") == "oom" and e["name"].startswith("out of memory")]
    assert [e["args"]["stack"] for e in marks] == [trig["Call Stack(C)"]]


def test_without_the_oom_analysis_the_snapshot_has_it(tmp_path):
    """Upstream's default analyses: the OOM_Snapshot row alone, with the stack."""
    p, d = native(tmp_path)
    rows = read_dump(only(dump_files(d)))
    assert not [r for r in rows if r["Event"] == "OOM_DETAIL"]
    [snap] = oom_rows(rows, "OOM_Snapshot")
    failing_call_stack(snap["Call Stack(C)"])
    for r in heap_rows(rows):
        assert nothing_asked_for(r), r


def test_a_shallow_call_stack_does_not_cut_the_failures(tmp_path):
    """--call-stack=c:1: every heap row has its one frame, the failure at least upstream's 50 when it has them."""
    p, d = native(tmp_path, "--call-stack=c:1", "--analysis=oom:2")
    rows = read_dump(only(dump_files(d)))
    for r in heap_rows(rows):
        if r["attr"].get("shadow") != "true":  # (a block made before collection started has none)
            assert len(r["Call Stack(C)"].splitlines()) == 1, r
    [trig] = oom_rows(rows, "OOM_TRIGGER")
    # the program's two frames, then libc's start-up
    assert len(failing_call_stack(trig["Call Stack(C)"])) >= 3


def test_the_db_rows_carry_it(tmp_path):
    p, d = native(tmp_path, "--analysis=oom:2", "--data-format=db")
    con = sqlite3.connect(str(next((d / "device_cpu" / "dump").glob("*.db"))))
    [(c, py)] = con.execute("SELECT \"Call Stack(C)\", \"Call Stack(Python)\" FROM memscope_dump "
                            "WHERE \"Event Type\"='OOM_TRIGGER'").fetchall()
    failing_call_stack(c)
    assert py == ""
    [cols] = [json.loads(c) for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='oom'")]
    assert cols["stack"] == c
    heap = [{"Call Stack(C)": c, "Call Stack(Python)": py} for c, py in con.execute(
        "SELECT \"Call Stack(C)\", \"Call Stack(Python)\" FROM memscope_dump WHERE Event='MALLOC' AND "
        "\"Event Type\"='HOST'")]
    con.close()
    assert len(heap) >= 4 and [r for r in heap if not nothing_asked_for(r)] == []


# ---------------------------------------------------------------- Python programs
def python_frames(stack):
    frames = stack.splitlines()
    assert frames and not [f for f in frames if "/msmemscope/" in f], stack  # not the package's own frames
    return frames


def test_pytorch_failure_under_the_cli_without_call_stack(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "too_large.py"
    script.write_text(TORCH_SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=oom:2", "--sinks=csv,html", "--output=out", "--", PY, script],
                tmp_path, env=ENV, check_rc=0)
    assert "failed 3" in p.stdout
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    trigs, snaps = oom_rows(rows, "OOM_TRIGGER"), oom_rows(rows, "OOM_Snapshot")
    assert len(trigs) == len(snaps) == 3
    line = 1 + TORCH_SCRIPT.splitlines().index(
        "        torch.empty(8 << 30, dtype=torch.uint8)  # 8 GiB: more than the limit leaves")
    listed = page_data(only(d.glob("report_*.html")))["oom"]["listed"]
    for t, s, f in zip(trigs, snaps, listed):
        assert python_frames(t["Call Stack(Python)"])[0] == f"{script}({line}): <module>", t["Call Stack(Python)"]
        assert t["Call Stack(C)"], t  # the C stack too (torch's allocator, the interpreter)
        assert (s["Call Stack(Python)"], s["Call Stack(C)"]) == (t["Call Stack(Python)"], t["Call Stack(C)"])
        assert f["stack"] == merged_stack(t)
    # the tensors and the heap rows: no stacks, none was asked for
    others = [r for r in rows if r["Event"] in ("MALLOC", "FREE")]
    assert [r for r in others if r["Event Type"] == "PTA"]
    assert [r for r in others if not nothing_asked_for(r)] == []


@pytest.mark.parametrize("mode", ["api", "cli"])
def test_pytorch_failure_with_the_python_api(tmp_path, mode):
    """tests/programs/python/oom_cpu.py: config() without call_stack (the
    operators go through the package's dispatch mode, whose frames are not
    the program's)."""
    pytest.importorskip("torch")
    rows = api_run(tmp_path, mode == "cli")
    line = 1 + API_SCRIPT.read_text().splitlines().index("    torch.empty(1 << 50, dtype=torch.uint8)")
    [trig] = oom_rows(rows, "OOM_TRIGGER")
    assert python_frames(trig["Call Stack(Python)"]) == [f"{API_SCRIPT}({line}): <module>"], trig
    assert trig["Call Stack(C)"]
    others = [r for r in rows if r["Event"] in ("MALLOC", "FREE")]
    assert len(others) > 8
    assert [r for r in others if not nothing_asked_for(r)] == []
