"""Issue #20 item 5: an out-of-memory failure with --analysis=oom gives the
same rows with the Python API (plain python3) as under the command line, in
upstream's order (csrc/event_trace/hal_hooks/hal_hooks.cpp HandleOOM: the
snapshot, then the trigger and the blocks): OOM_Snapshot, OOM_Trigger,
OOM_RecentAlloc x K, OOM_TopAlloc x K, then our OOM_Snapshot_After
(upstream's names); every block listed once (a CPU tensor's storage is one
PTA block, not also the HOST malloc under it); the snapshot's numbers are
the framework's as upstream's (torch's allocated/reserved: the tensors
live, not also the mallocs under them); the rows carry the failing thread.
Without oom: test_oom_rows_plain.py."""
import pytest

from memory_bound_util import check_snapshot_bound
from oom_rows_util import MiB, live_framework_bytes, oom_rows, run

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return {mode: run(tmp_path_factory.mktemp(mode), mode == "cli") for mode in ("api", "cli")}


@pytest.mark.parametrize("mode", ["api", "cli"])
def test_oom_rows(both, mode):
    rows = both[mode]
    got = oom_rows(rows)
    assert [(r["Event Type"], r["Name"]) for r in got] == (
        [("SNAPSHOT", "OOM_Snapshot"), ("OOM_TRIGGER", "OOM_Trigger")] + [("OOM_RECENT_ALLOC", "OOM_RecentAlloc")] * 3 +
        [("OOM_TOP_ALLOC", "OOM_TopAlloc")] * 3 + [("SNAPSHOT", "OOM_Snapshot_After")])
    # one after the other: nothing between the snapshot and the trigger's rows
    assert [int(r["ID"]) for r in got[:8]] == list(range(int(got[0]["ID"]), int(got[0]["ID"]) + 8))
    snapshot, trigger = got[0], got[1]
    assert snapshot["Timestamp(ns)"] == trigger["Timestamp(ns)"]
    assert trigger["attr"]["func"] == "posix_memalign" and trigger["attr"]["req_size"] == str(1 << 50)
    # the failing thread (the main thread: its id is the process id) on every row
    assert {(r["Process Id"], r["Thread Id"]) for r in got} == {(trigger["Process Id"], trigger["Process Id"])}
    # the three largest live blocks: three of the four 1 MiB tensors, as PTA
    # blocks only (the malloc under each is not listed again)
    top = [r["attr"] for r in got if r["Event Type"] == "OOM_TOP_ALLOC"]
    assert [(a["pool"], a["size"]) for a in top] == [("PTA", str(MiB))] * 3
    assert len({a["ptr"] for a in top}) == 3
    recent = [r["attr"] for r in got if r["Event Type"] == "OOM_RECENT_ALLOC"]
    assert len({(a["ptr"]) for a in recent}) == 3
    # allocated: the four tensors, once (not also the mallocs under them)
    expected = live_framework_bytes(rows, int(snapshot["ID"]))
    assert expected == 4 * MiB
    for snap in (snapshot, got[-1]):  # nothing changed before the failure was handled
        a = snap["attr"]
        assert a["allocated"] == a["max_allocated"] == a["reserved"] == a["max_reserved"] == str(expected), a
        assert a["reserved_rate"] == "100.000000", a
        # no rlimit: the machine's memory, or a cgroup's where one limits it (before: total:0,free:0)
        check_snapshot_bound(a)


def test_python_api_and_cli_write_the_same_oom_rows(both):
    kinds = {m: [(r["Event"], r["Event Type"], r["Name"], tuple(r["attr"])) for r in oom_rows(rows)]
             for m, rows in both.items()}
    assert kinds["api"] == kinds["cli"]
