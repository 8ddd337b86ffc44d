"""The trace sink (trace_{ts}.json) tells the truth about a real PyTorch CPU
training loop run under the CLI (Linear layers, Adam, 5 steps with
msmemscope.step()), checked against the dump, the summary and torch itself:

- it loads in json and follows the Trace Event Format: microsecond times,
  counters in time order per track, spans that nest per thread (no child
  ending after its parent, no overlapping siblings, no negative durations);
- the memory counters count each byte once, as the summary does: the PTA
  counter is the dump's running `used` at the same timestamps, the HOST
  counter the dump's HOST `used` less the host blocks a tensor took (the
  rows count a CPU tensor's storage under HOST too), their peaks are the
  summary's, HOST + PTA never exceeds "cpu in use", and the PTA counter
  holds torch's parameters, gradients and Adam state at each step;
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


def host_and_pta_once(rows):
    """The HOST and PTA counters the trace should draw, from the dump's rows:
    PTA's running `used`; HOST's less the bytes of its live blocks that a
    PTA block took (same address). A host block that the very next memory
    row takes was never the host heap's: no point for it. Unchanged values
    are not drawn again. The imports' heap (rows without `used`, Attr
    import:true) is written again as a FREE then a MALLOC: its change is
    one point, at the MALLOC (at exit no row with `used` follows it)."""
    want = {"HOST": {}, "PTA": {}}
    last = {"HOST": None, "PTA": None}
    live, taken = {}, {}
    host_used = None
    pending = None  # (timestamp, address) of a host block's point not drawn yet
    takes = 0
    imports_change = 0  # the imports' heap FREE awaiting its MALLOC

    def draw(pool, t, v):
        if v != last[pool]:
            want[pool][t] = v
        last[pool] = v

    mem = [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] in ("HOST", "PTA")
           and ("used" in r["attr"] or r["attr"].get("import") == "true")]
    for r in mem:
        t, addr, pool = int(r["Timestamp(ns)"]), int(r["Ptr"], 16), r["Event Type"]
        take = r["Event"] == "MALLOC" and pool == "PTA"
        if pending and not (take and addr == pending[1]):
            draw("HOST", pending[0], host_used - sum(taken.values()))
        pending = None
        if "used" not in r["attr"]:  # the imports' heap
            imports_change += int(r["attr"]["size"]) * (1 if r["Event"] == "MALLOC" else -1)
            if r["Event"] == "MALLOC":
                if host_used is not None:
                    host_used += imports_change
                    draw("HOST", t, host_used - sum(taken.values()))
                imports_change = 0
            continue
        if take:
            if addr in live and addr not in taken:
                taken[addr] = live[addr]
                takes += 1
                draw("HOST", t, host_used - sum(taken.values()))
            draw("PTA", t, int(r["attr"]["used"]))
        elif pool == "PTA":
            draw("PTA", t, int(r["attr"]["used"]))
        else:
            taken.pop(addr, None)
            if r["Event"] == "MALLOC":
                live[addr] = int(r["attr"]["size"])
            else:
                live.pop(addr, None)
            host_used = int(r["attr"]["used"])
            if r["Event"] == "MALLOC":
                pending = (t, addr)
            else:
                draw("HOST", t, host_used - sum(taken.values()))
    if pending:
        draw("HOST", pending[0], host_used - sum(taken.values()))
    return want, takes


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

    # counters: each byte once, from the dump's rows, at the same timestamps
    counters = defaultdict(dict)
    for e in ev:
        if e["ph"] == "C":
            counters[e["name"]][ns(doc, e["ts"])] = e["args"]["bytes"]
    want, takes = host_and_pta_once(rows)
    assert takes > 100  # tensors' storage from malloc: what the rows count twice
    for pool in ("HOST", "PTA"):
        assert counters[f"cpu {pool} allocated"] == want[pool], pool
    summary = json.loads((d / "summary.json").read_text())
    for pool in ("HOST", "PTA"):
        assert max(counters[f"cpu {pool} allocated"].values()) == summary["pools"][f"cpu/{pool}"]["peak_bytes"], pool
    # what the rows' HOST `used` says is more (a tensor's bytes twice)
    assert max(int(r["attr"]["used"]) for r in rows if r["Event Type"] == "HOST" and "used" in r["attr"]) > \
        summary["pools"]["cpu/HOST"]["peak_bytes"]
    in_use = sorted(counters["cpu in use"].items())
    host, pta = sorted(counters["cpu HOST allocated"].items()), sorted(counters["cpu PTA allocated"].items())
    for t in sorted(set(counters["cpu HOST allocated"]) | set(counters["cpu PTA allocated"])):
        at = lambda series: ([v for x, v in series if x <= t] or [0])[-1]
        assert at(host) + at(pta) <= at(in_use), t

    # torch's truth: after each optimizer step the pool holds at least the
    # parameters, their gradients and Adam's state
    steps = [e for e in ev if e["ph"] == "i" and e["cat"] == "step"]
    step_rows = [r for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert [(e["name"], ns(doc, e["ts"])) for e in steps] == \
        [(f"end of step {r['Name']}", int(r["Timestamp(ns)"])) for r in step_rows]
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
    summary = json.loads((d / "summary.json").read_text())
    for pool in ("HOST", "PTA"):
        peak = summary["pools"][f"cpu/{pool}"]["peak_bytes"]
        tracks = od["downsampled"]["memory_counters"]["tracks"]
        assert max(e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["name"] == f"cpu {pool} allocated") == peak
        assert tracks[f"cpu {pool} allocated"]["written"] == \
            sum(1 for e in ev if e["ph"] == "C" and e["name"] == f"cpu {pool} allocated")
    check_nesting(ev)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev)
