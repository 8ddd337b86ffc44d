"""--steps=2,3 on a real PyTorch loop: the pools' figures are those of the
program during the selected steps, not of the blocks allocated within them.

The host drops the events of the other steps (framework/host/step_filter.h);
when a selected step starts, the blocks then live that the output never saw
allocated (the weights, the optimizer's state, a tensor kept from step 1) get
a shadow MALLOC, and the blocks it holds that were freed in the dropped steps
a shadow FREE (framework/host/step_gap.h). Before, `cpu/PTA: peak 4.0 MiB,
final 1.0 MiB` was said of a loop whose pool held 12 MiB in those steps.

The truth is the same script's run without --steps: the running total of its
PTA rows, restricted to the selected steps (the total when a step starts, and
after each of its rows). The console, summary.json, the html page, the
trace's counter track, the memory_viz snapshot's segments and the db say it,
and the --steps dump keeps upstream's rules (test_upstream_dump_check.py:
every allocation_id one MALLOC and one FREE, `used` adds up).

An allocation that fails for lack of memory in a step not selected is kept,
with the memory live then, and the console says where it happened.
"""
import json
import re
import sqlite3
from collections import defaultdict

import pytest

from conftest import BUILD, SOURCE, dump_files, process_dirs, read_dump, run_cli
from sinks_common import load_trace, only, render
from test_html_truth import device, page_data
from test_sinks_memory_viz import load as load_snapshot, totals as snapshot_totals
from test_upstream_dump_check import check_dump

pytest.importorskip("torch")

PY = "/usr/bin/python3"
ENV = {"PYTHONPATH": str(BUILD / "python"), "LD_PRELOAD": ""}

SCRIPT = """\
import torch
import msmemscope

msmemscope.start()
torch.manual_seed(0)
model = torch.nn.Linear(512, 1024)       # step 1: 2 MiB of weight, kept
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
big = torch.zeros(1 << 20)               # step 1: 4 MiB, freed in step 2
x = torch.randn(64, 512)
for i in range(1, 7):                    # steps 1..6: msmemscope.step() ends each
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    if i == 2:
        del big
    if i == 3:
        mid = torch.ones(1 << 18)        # step 3: 1 MiB, freed in step 4
    if i == 4:
        del mid
        late = torch.ones(3 << 18)       # step 4: 3 MiB, live in step 5
    msmemscope.step()
msmemscope.stop()
"""


def human(n):
    """framework/util/text.cpp human_bytes."""
    v, u = float(n), 0
    while abs(v) >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{n} B" if u == 0 else f"{v:.1f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][u]}"


def run(tmp_path, name, *opts):
    script = tmp_path / "steps_peak.py"
    script.write_text(SCRIPT)
    out = tmp_path / name
    p = run_cli(["--device=cpu", "--collect-mode=deferred", *opts, f"--output={out}", "--", PY, script], tmp_path,
                env=ENV, check_rc=0)
    return p, only(process_dirs(out))


def truth(rows, selected):
    """(peak, final) of the PTA pool over the selected steps of a run without
    --steps: its live bytes when each step starts and after each of its rows;
    final, when the last selected step ends. Step k: the rows after the
    (k-1)-th STEP row (msmemscope.step() ends a step)."""
    live, step, peak, final = 0, 1, 0, None
    for r in rows:
        if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP":
            if step == max(selected):
                final = live
            step += 1
            if step in selected:
                peak = max(peak, live)
        elif r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "PTA":
            live += int(r["attr"]["size"]) * (1 if r["Event"] == "MALLOC" else -1)
            if step in selected:
                peak = max(peak, live)
    return peak, final


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    p, d = run(tmp, "out", "--analysis=", "--sinks=csv")
    return read_dump(only(dump_files(d)))


def pta_line(stdout):
    (line,) = [l for l in stdout.splitlines() if l.startswith("  cpu/PTA: ")]
    return line


@pytest.mark.parametrize("selected", [(2, 3), (2, 5)])
def test_the_pools_figures_are_the_programs_during_the_selected_steps(full, tmp_path, selected):
    peak, final = truth(full, set(selected))
    steps = ",".join(map(str, selected))
    p, d = run(tmp_path, "out", f"--steps={steps}", "--analysis=", "--sinks=csv,html,trace,memory_viz,db")
    assert pta_line(p.stdout) == f"  cpu/PTA: peak {human(peak)}, final {human(final)}", p.stdout
    summary = json.loads((d / "summary.json").read_text())
    assert summary["pools"]["cpu/PTA"] == {"peak_bytes": peak, "final_bytes": final}
    # the html page's framework pools (PTA alone on this cpu)
    page = page_data(only(d.glob("report_*.html")))
    assert device(page, "cpu framework pools")["peak"] == peak
    # ... and its charts shade what was not collected: before the first
    # selected step, between two apart (2,5), after the last (it said 0 B
    # before step 2 and drew a flat level after step 3, where the program
    # went on unseen)
    # each msmemscope.step() is marked where it ends its step, and says so
    # (it read "step 1" at step 2's start)
    assert [m[1] for m in page["marks"]] == [f"end of step {k}" for k in range(1, 7)]
    ends = {int(m[1].rsplit(" ", 1)[1]): m[0] for m in page["marks"]}
    spans, at = [], 0
    for k in sorted(selected):
        if ends[k - 1] > at:
            spans.append([at, ends[k - 1]])
        at = ends[k]
    spans.append([at, page["end_ns"] - page["start_ns"]])
    assert page["uncollected"] == spans
    assert page["steps_selected"] == list(selected)
    dom = render(only(d.glob("report_*.html")), tmp_path)
    assert (f'<p class="note" id="steps-uncollected">Shaded: not collected (--steps={steps} keeps the events of those '
            "steps only): nothing was recorded there, and the level drawn through it is the one before. A selected "
            "step starts from the blocks live at its start (shadow rows: allocated earlier, no stack), so its peak "
            "and final are the program's.</p>") in dom
    # the trace's track of the pool
    doc = load_trace(only(d.glob("trace_*.json")))
    assert max(e["args"]["bytes"] for e in doc["traceEvents"]
               if e["ph"] == "C" and e["name"] == "cpu PTA allocated") == peak
    # the memory_viz snapshot: the pool's blocks live at the end (of step 3 / 5)
    snap = load_snapshot(only(d.glob("memory_viz_*.pickle")))
    assert snapshot_totals(snap)["cpu framework pools (PTA)"][1] == final
    # upstream's dump rules hold on the --steps dump (shadow rows included)
    rows = check_dump(only(dump_files(d)))
    # its running total is the truth: the peak over the rows, and the total
    # when the last selected step ends
    live, seen_peak, at_end = 0, 0, None
    for r in rows:
        if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "PTA":
            live += int(r["attr"]["size"]) * (1 if r["Event"] == "MALLOC" else -1)
            seen_peak = max(seen_peak, live)
        elif r["Event"] == "SYSTEM" and r["Event Type"] == "STEP" and r["Name"] == str(max(selected)):
            at_end = live
    assert (seen_peak, at_end) == (peak, final)
    # the db holds the same rows
    db = only(d.rglob("memscope_dump_*.db"))
    with sqlite3.connect(db) as con:
        n = con.execute("SELECT COUNT(*) FROM memscope_dump WHERE Event IN ('MALLOC', 'FREE')").fetchone()[0]
    assert n == len([r for r in rows if r["Event"] in ("MALLOC", "FREE")])


# ---------------------------------------------------------------- a failure in a step not selected
OOM_SCRIPT = """\
import ctypes
import msmemscope

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
msmemscope.start()
for i in range(1, 4):
    if i == 1:
        print("failed", libc.malloc(1 << 60) is None)   # no memory for 1 EiB
    msmemscope.step()
msmemscope.stop()
"""
FAILED = r"^\[msmemscope\] warning: oom: malloc of 1152921504606846976 bytes failed on device cpu with (\d+) bytes allocated$"


def run_oom(tmp_path, name, *opts):
    script = tmp_path / "oom_step1.py"
    script.write_text(OOM_SCRIPT)
    p = run_cli(["--device=cpu", "--collect-mode=deferred", *opts, f"--output={tmp_path / name}", "--", PY, script],
                tmp_path, env=ENV, check_rc=0)
    assert "failed True" in p.stdout
    return p, only(process_dirs(tmp_path / name))


@pytest.mark.parametrize("analysis, report", [
    ([], "oom: 1 out-of-memory failure(s), an OOM_Snapshot row each; --analysis=oom adds the failing call and the "
         "most recent and largest live blocks (OOM_DETAIL rows)"),
    (["--analysis=oom"], "oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)")])
def test_a_failure_in_a_step_not_selected_is_kept_and_said(tmp_path, analysis, report):
    # Before: with --steps=2 the run said nothing of it, its dump had no row of it.
    whole, _ = run_oom(tmp_path, "whole", *analysis)
    p, d = run_oom(tmp_path, "out", "--steps=2", *analysis)
    text = p.stdout + p.stderr
    # the analysis saw the memory live when it failed, as without --steps
    # (within a few bytes: the interpreter's heap differs a little between runs)
    (allocated,) = re.findall(FAILED, text, re.M)
    (without,) = re.findall(FAILED, whole.stdout + whole.stderr, re.M)
    assert abs(int(allocated) - int(without)) < 4096 and int(without) > 1 << 20, (allocated, without)
    assert report in p.stdout.splitlines()
    pid = re.search(r"^msmemscope: pid (\d+) ", p.stdout, re.M).group(1)
    assert (f"msmemscope: warning: pid {pid}: --steps: an allocation failed for lack of memory outside the selected "
            "steps (in step 1); its failure is kept, with the memory live at that moment, which the pools' figures "
            "count too") in p.stderr.splitlines()
    rows = check_dump(only(dump_files(d)), pools_list=(("HOST",),))
    # its OOM_Snapshot row, in step 1 (before the STEP row that ends it), says the same bytes
    (at,) = [i for i, r in enumerate(rows) if r["Name"] == "OOM_Snapshot"]
    assert rows[at]["attr"]["allocated"] == allocated
    assert at < min(i for i, r in enumerate(rows) if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP")


# ---------------------------------------------------------------- the host's rows, the trace's tracks
@pytest.fixture(scope="module")
def steps23(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("steps23")
    p, d = run(tmp, "out", "--steps=2,3", "--analysis=", "--sinks=csv,trace")
    return p, d, read_dump(only(dump_files(d)))


def step_starts(rows, selected):
    """The times the selected steps start: the STEP row that ends the step before."""
    return {k: int(r["Timestamp(ns)"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"
            for k in selected if r["Name"] == str(k - 1)}


def test_the_console_counts_the_shadow_rows_apart_from_the_events(steps23):
    # Before: `events: 2787, dropped: 0` for a loop whose selected steps sent
    # a few hundred: the shadow rows written as a selected step starts (one
    # per block allocated or freed in the steps left out) were counted in.
    p, d, rows = steps23
    starts = set(step_starts(rows, (2, 3)).values())
    written = [r for r in rows if r["attr"].get("shadow") == "true" and int(r["Timestamp(ns)"]) in starts]
    assert len(written) > 1000
    summary = json.loads((d / "summary.json").read_text())
    assert summary["steps_shadow_rows"] == len(written)
    # every other row is an event the program sent, but the end's shadow
    # FREEs (the blocks live at the end), which are not counted either
    at_end = [r for r in rows if r["Event"] == "FREE" and r["attr"].get("shadow") == "true"
              and int(r["Timestamp(ns)"]) not in starts]
    assert summary["events"] == len(rows) - len(written) - len(at_end)
    assert (f"  events: {summary['events']}, dropped: 0, --steps shadow rows: {len(written)} (the blocks allocated "
            "or freed in the steps left out, written as a selected step starts)") in p.stdout.splitlines(), p.stdout


def test_the_devices_in_use_track_moves_with_the_shadow_rows(steps23):
    # Before: "cpu in use" had no point at step 2's start, where the shadow
    # rows had moved the pools' tracks (PTA at 12 MiB): it caught up at the
    # next row with `device_used`.
    p, d, rows = steps23
    doc = load_trace(only(d.glob("trace_*.json")))
    # a few thousand samples, many at the same instants: within the budget
    # (it said "the run is over the trace's budget ... downsampled to 2543
    # of 2555 samples (, each keeping ...)")
    assert doc["otherData"]["downsampled"] == {} and "over the trace's budget" not in p.stdout + p.stderr
    base = doc["otherData"]["start_ns"]
    tracks = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            tracks[e["name"]].append((base + round(float(e["ts"]) * 1000), e["args"]["bytes"]))

    def at(name, t):
        return ([v for x, v in sorted(tracks[name]) if x <= t] or [None])[-1]

    for k, t in step_starts(rows, (2, 3)).items():
        host, pta, in_use = at("cpu HOST allocated", t), at("cpu PTA allocated", t), at("cpu in use", t)
        # the program's bytes in use then: the next row that says them, less its own
        assert in_use == in_use_before_next_row(rows, t), (k, in_use)
        # on the cpu the framework's blocks are the host heap's: in use counts
        # each byte once, as the two pools' tracks do
        assert pta and host and in_use == host + pta, (k, host, pta, in_use)


def in_use_before_next_row(rows, t):
    """The device's bytes in use just before the first row after time t that
    carries `device_used` (the host heap's rows move it, the framework's not)."""
    r = next(r for r in rows if int(r["Timestamp(ns)"]) > t and "device_used" in r["attr"])
    change = int(r["attr"]["size"]) * (1 if r["Event"] == "MALLOC" else -1) if r["Event Type"] == "HOST" else 0
    return int(r["attr"]["device_used"]) - change


# ---------------------------------------------------------------- the page's shading is the host's
MSTX_SCRIPT = SOURCE / "tests" / "programs" / "python" / "mstx_api" / "marks.py"


def test_the_page_shades_what_the_host_dropped_with_mstx_steps(tmp_path):
    # --steps=1 with mstx "step start" ranges: the events before the first
    # range are step 1's (msmemscope.step() numbering until a range is seen,
    # framework/host/step_filter.h) and are collected. Before, the page
    # recomputed the spans with a rule of its own, which took only the kept
    # ranges as collected: it shaded the start of the run as not collected.
    out = tmp_path / "out"
    run_cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--collect-mode=deferred", "--steps=1",
             "--sinks=csv,html", f"--output={out}", "--", PY, MSTX_SCRIPT], tmp_path, env=ENV, check_rc=0)
    d = only(process_dirs(out))
    rows = read_dump(only(dump_files(d)))
    # the last range end kept: step 1's (its inner range ends before it)
    (step1_end,) = [int(r["Timestamp(ns)"]) for r in rows if r["Event"] == "MSTX"
                    and r["Event Type"] == "Range_end"][-1:]
    assert any(r["Event"] == "MALLOC" and int(r["Timestamp(ns)"]) < step1_end for r in rows)
    page = page_data(only(d.glob("report_*.html")))
    assert page["uncollected"] == [[step1_end - page["start_ns"], page["end_ns"] - page["start_ns"]]]
    assert page["steps_selected"] == [1]
