"""The trace sink (trace_{ts}.json) tells the truth about a real PyTorch CPU
training loop run under the CLI (Linear layers, Adam, 5 steps with
msmemscope.step()), checked against the dump, the summary and torch itself:

- it loads in json and follows the Trace Event Format: microsecond times,
  counters in time order per track, spans that nest per thread (no child
  ending after its parent, no overlapping siblings, no negative durations);
- the memory counters are the dump's running `used` at the same timestamps,
  their peak the dump's (and the summary's for the framework pool), and the
  PTA counter holds torch's parameters, gradients and Adam state at each step;
- one operator span per ATEN_START row, with its name; one step instant per
  SYSTEM STEP row at its time; one Python span per python_trace row;
- the process and every thread with a track are named (process_name,
  thread_name), so that Perfetto shows more than a bare number;
- over its budget (trace.max_events) the cut trace is still valid, says what
  it left out in otherData and the console, and keeps every operator span.
"""
import csv
import json
import re
from collections import Counter, defaultdict

import pytest

from conftest import dump_files, process_dirs, read_dump, run_cli
from sinks_common import load_trace, only

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = """\
import json
import msmemscope
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(16, 64)
y = torch.randn(16, 4)
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    msmemscope.step()
params = sum(p.numel() * p.element_size() for p in model.parameters())
grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
print("TRUTH " + json.dumps({"params": params, "grads": grads, "state": state}))
"""


def run(tmp_path, events, *extra):
    (tmp_path / "train.py").write_text(SCRIPT)
    p = run_cli(["--device=cpu", "--call-stack=python", f"--events={events}", "--sinks=csv,trace",
                 f"--output={tmp_path / 'out'}", *extra, "--", PY, "train.py"], cwd=tmp_path,
                env={"PYTHONPATH": ""}, timeout=300, check_rc=0)
    truth = json.loads(re.search(r"^TRUTH (.*)$", p.stdout, re.M).group(1))
    d = only(process_dirs(tmp_path / "out"))
    return p, truth, d, load_trace(only(d.glob("trace_*.json"))), read_dump(only(dump_files(d)))


def ns(doc, ts):
    """A trace time (microseconds with nanosecond digits) as the dump's ns."""
    return doc["otherData"]["start_ns"] + round(ts * 1000)


def check_nesting(events):
    """X spans per (pid, tid) nest: each starts and ends inside the one open."""
    by = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"]))
    for key, spans in by.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ = []
        for start, dur, name in spans:
            while open_ and open_[-1][0] <= start:
                open_.pop()
            assert not open_ or start + dur <= open_[-1][0], (key, name, start, dur, open_[-1])
            open_.append((start + dur, name))


def test_trace_matches_dump_summary_and_torch(tmp_path):
    _, truth, d, doc, rows = run(tmp_path, "alloc,free,launch,traceback")
    ev = doc["traceEvents"]
    pid = doc["otherData"]["pid"]
    assert doc["otherData"]["truncated"] is False and doc["otherData"]["downsampled"] == {}
    # every event of the process, named threads (the fix: thread_name metadata)
    assert {e["pid"] for e in ev} == {pid}
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {pid: f"main thread {pid}"}
    assert [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"] == \
        [f"{PY} train.py (pid {pid})"]
    assert {e["tid"] for e in ev if e["ph"] in ("X", "i")} <= set(names)
    check_nesting(ev)

    # counters: the dump's running `used` per pool, at the same timestamps
    counters = defaultdict(dict)
    for e in ev:
        if e["ph"] == "C":
            counters[e["name"]][ns(doc, e["ts"])] = e["args"]["bytes"]
    for pool in ("HOST", "PTA"):
        want, last = {}, None
        for r in rows:
            if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == pool and "used" in r["attr"]:
                used = int(r["attr"]["used"])
                if used != last:  # an unchanged value is not drawn again
                    want[int(r["Timestamp(ns)"])] = used
                last = used
        assert counters[f"cpu {pool} allocated"] == want, pool
    summary = json.loads((d / "summary.json").read_text())
    assert max(counters["cpu PTA allocated"].values()) == summary["pools"]["cpu/PTA"]["peak_bytes"]

    # torch's truth: after each optimizer step the pool holds at least the
    # parameters, their gradients and Adam's state
    steps = [e for e in ev if e["ph"] == "i" and e["cat"] == "step"]
    step_rows = [r for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert [(e["name"], ns(doc, e["ts"])) for e in steps] == \
        [(f"step {r['Name']}", int(r["Timestamp(ns)"])) for r in step_rows]
    assert len(steps) == 5
    pta = sorted(counters["cpu PTA allocated"].items())
    floor = truth["params"] + truth["grads"] + truth["state"]
    for e in steps:
        at = ns(doc, e["ts"])
        assert [v for t, v in pta if t <= at][-1] >= floor, (e["name"], floor)

    # operators: one span per ATEN_START row, same names, same start times
    ops = [e for e in ev if e["ph"] == "X" and e["cat"] == "op"]
    starts = [r for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START"]
    assert len(ops) == len(starts) > 100
    assert Counter((e["name"], ns(doc, e["ts"])) for e in ops) == \
        Counter((r["Name"], int(r["Timestamp(ns)"])) for r in starts)
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.mse_loss.default"} <= {e["name"] for e in ops}

    # Python calls: one span per python_trace row, start and end
    with open(only(dump_files(d, kind="python_trace")), newline="") as f:
        calls = Counter((r["FuncInfo"], int(r["StartTime(ns)"]), int(r["EndTime(ns)"])) for r in csv.DictReader(f))
    spans = Counter((e["name"], ns(doc, e["ts"]), ns(doc, e["ts"]) + round(e["dur"] * 1000))
                    for e in ev if e["ph"] == "X" and e["cat"] == "python")
    assert spans == calls


def test_cut_trace_is_valid_and_says_what_is_missing(tmp_path):
    p, _, d, doc, rows = run(tmp_path, "alloc,free,launch,traceback", "--plugin-option=trace.max_events=5000")
    ev = doc["traceEvents"]
    od = doc["otherData"]
    path = only(d.glob("trace_*.json"))
    assert od["truncated"] is True and od["max_events"] == 5000 and od["events"] == len(ev)
    with open(only(dump_files(d, kind="python_trace")), newline="") as f:
        calls = sum(1 for _ in csv.DictReader(f))
    written = sum(1 for e in ev if e["ph"] == "X" and e["cat"] == "python")
    assert od["downsampled"]["python_calls"] == {"spans": calls, "written": written}
    assert 0 < written < calls
    assert f"{calls - written} Python call spans past the budget not written" in od["downsampled_note"]
    # the file by its name: the note is in it, in the process folder
    assert f"every operator, kernel and mstx span, step, mark and leak is in {path.name}," in od["downsampled_note"]
    assert od["downsampled_note"].startswith("the run is over the trace's budget (options max_events=5000, ")
    # the log's warning and the end-of-run report say the same
    assert f"[msmemscope] warning: trace: {od['downsampled_note']}\n" in p.stderr
    assert f"\ntrace: {od['downsampled_note']}\n" in p.stdout + p.stderr
    # what is kept is whole: every operator span, every step, the counters'
    # peaks (each bucket keeps its highest value), and it still nests
    starts = [r for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START"]
    assert len([e for e in ev if e["ph"] == "X" and e["cat"] == "op"]) == len(starts)
    assert len([e for e in ev if e["ph"] == "i" and e["cat"] == "step"]) == 5
    for pool in ("HOST", "PTA"):
        peak = max(int(r["attr"]["used"]) for r in rows
                   if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == pool and "used" in r["attr"])
        tracks = od["downsampled"]["memory_counters"]["tracks"]
        assert max(e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["name"] == f"cpu {pool} allocated") == peak
        assert tracks[f"cpu {pool} allocated"]["written"] == \
            sum(1 for e in ev if e["ph"] == "C" and e["name"] == f"cpu {pool} allocated")
    check_nesting(ev)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev)
