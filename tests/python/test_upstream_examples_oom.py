"""Upstream's OOM cases, adapted to the CPU (tests/python/upstream_examples/
bp_oom.py), under an address-space limit so that the allocator fails after a
few 512 MiB tensors:

- docs/zh/best_practices §6 (Python API, default analysis leaks): "OOM 发生时，
  工具会自动落盘快照信息到 memscope_dump_{timestamp}.csv". What upstream's code
  writes then (csrc/event_trace/hal_hooks/hal_hooks.cpp HandleOOM, without
  its oom analysis): one SNAPSHOT row named OOM_Snapshot per failure, with
  torch's numbers (allocated/reserved: the tensors), nothing else;
- docs/zh/user_guide/memory_analysis.md "OOM分析" (command line,
  `msmemscope --analysis=oom:30,leaks python train.py`): the OOM_Snapshot
  row, then OOM_DETAIL rows: the trigger (function, requested size), the K
  most recent and the K largest blocks still allocated (pool, ptr, size,
  timestamp), recent ones newest first and the largest ones biggest first
  (upstream's example/oom/oom_utils.py checks), in the existing dump file.
The same without --analysis=oom under the CLI: test_oom_rows_plain.py."""
import resource

import pytest

from upstream_examples_util import PY, api, cli, only_process, rows_of, upstream_layout

pytest.importorskip("torch")

LIMIT = 3 << 30  # address space: torch and the tool fit, a few 512 MiB tensors do not
TENSOR = 1024 * 1024 * 128 * 4


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def trigger(rows):
    trig = rows_of(rows, "OOM_DETAIL", "OOM_TRIGGER")
    assert trig, sorted({(r["Event"], r["Event Type"]) for r in rows})
    a = trig[0]["attr"]
    assert trig[0]["Name"] == "OOM_Trigger" and {"func", "req_size", "flag"} <= set(a), trig[0]
    assert int(a["req_size"]) >= TENSOR
    return trig


def tensors_made(stdout):
    n = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("allocated ")]
    assert len(n) == 1 and n[0] >= 1, stdout
    return n[0]


def check_snapshot(rows, snap, n):
    """The OOM_Snapshot row at the failure after n tensors: torch's numbers
    (the tensors live, each once: not the mallocs under them again), the
    failing thread (the main thread, whose id is the process id)."""
    assert (snap["Thread Id"], snap["Device Id"]) == (snap["Process Id"], "cpu"), snap
    tensors = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA" and int(r["ID"]) < int(snap["ID"])]
    assert [int(r["attr"]["size"]) for r in tensors[-n:]] == [TENSOR] * n
    assert {r["Thread Id"] for r in tensors} == {snap["Thread Id"]}
    live = {}
    for r in rows:
        if int(r["ID"]) >= int(snap["ID"]):
            break
        if r["Event Type"] == "PTA":
            if r["Event"] == "MALLOC":
                live[r["Ptr"]] = int(r["attr"]["size"])
            elif r["Event"] == "FREE":
                live.pop(r["Ptr"], None)
    assert sum(live.values()) == n * TENSOR
    a = snap["attr"]
    assert list(a) == ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free", "device_rate",
                       "reserved_rate",
                       "limit"]  # ours after upstream's: which memory bound total and free are
    # the CPU has no caching allocator: reserved is what the tensors hold
    assert a["allocated"] == a["max_allocated"] == a["reserved"] == a["max_reserved"] == str(n * TENSOR), a
    assert a["reserved_rate"] == "100.000000"


def test_oom_snapshot_python_api(tmp_path):
    p = api(tmp_path, "bp_oom.py", preexec_fn=limited)
    assert "OOM detected: " in p.stdout, p.stdout
    n = tensors_made(p.stdout)
    rows = upstream_layout(only_process(tmp_path / "output"))
    assert not rows_of(rows, "OOM_DETAIL")  # upstream: only with its oom analysis
    snaps = rows_of(rows, "SNAPSHOT")
    assert snaps and {(r["Event Type"], r["Name"]) for r in snaps} == {("SNAPSHOT", "OOM_Snapshot")}, snaps
    ids = [int(r["ID"]) for r in rows]
    assert ids == sorted(ids)
    check_snapshot(rows, snaps[0], n)
    # written at the failure, before collection stops
    assert int(snaps[-1]["ID"]) < int(rows_of(rows, "SYSTEM", "STOP_TRACE")[0]["ID"])
    # (said in config()'s words: the example sets its options with msmemscope.config())
    assert 'out-of-memory failure(s), an OOM_Snapshot row each; analysis="oom" adds' in p.stdout, p.stdout[-2000:]


def test_oom_analysis_command_line(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--analysis=oom:30,leaks", "--output=out"], [PY, "bp_oom.py", "cli"],
            preexec_fn=limited)
    assert "OOM detected: " in p.stdout, p.stdout[-3000:]
    rows = upstream_layout(only_process(tmp_path / "out"))
    trig = trigger(rows)
    # upstream's order (hal_hooks.cpp HandleOOM): the snapshot, then the trigger
    before = [r for r in rows if int(r["ID"]) == int(trig[0]["ID"]) - 1]
    assert before and (before[0]["Event"], before[0]["Name"]) == ("SNAPSHOT", "OOM_Snapshot"), before
    check_snapshot(rows, before[0], tensors_made(p.stdout))
    detail = rows_of(rows, "OOM_DETAIL")
    recent = [r for r in detail if r["Event Type"] == "OOM_RECENT_ALLOC"]
    top = [r for r in detail if r["Event Type"] == "OOM_TOP_ALLOC"]
    assert 0 < len(recent) <= 30 * len(trig) and 0 < len(top) <= 30 * len(trig)
    for r in recent + top:
        assert {"pool", "ptr", "size", "timestamp"} <= set(r["attr"]), r["attr"]
    first_top = [r for r in top if int(r["ID"]) < int(trig[1]["ID"])] if len(trig) > 1 else top
    first_recent = [r for r in recent if int(r["ID"]) < int(trig[1]["ID"])] if len(trig) > 1 else recent
    sizes = [int(r["attr"]["size"]) for r in first_top]
    assert sizes == sorted(sizes, reverse=True)
    stamps = [int(r["attr"]["timestamp"]) for r in first_recent]
    assert stamps == sorted(stamps, reverse=True)
    # the tensors made before the failure are the largest blocks still allocated
    assert sizes[0] >= TENSOR
    # every block once: a tensor is its PTA block, not also the HOST malloc under it
    ptrs = [r["attr"]["ptr"] for r in first_top]
    assert len(set(ptrs)) == len(ptrs), [(r["attr"]["pool"], r["attr"]["ptr"]) for r in first_top]
    assert first_top[0]["attr"]["pool"] == "PTA"
