"""Issue #20 item 5: an out-of-memory failure without the oom analysis
(upstream's default, leaks) writes what upstream's code writes then: the
OOM_Snapshot row alone at each failure (csrc/event_trace/hal_hooks/
hal_hooks.cpp HandleOOM: the trigger and the blocks only with
--analysis=oom), the same with the Python API and under the CLI, with the
framework's numbers (the tensors live, once) and the failing thread."""
import pytest

from memory_bound_util import check_snapshot_bound
from oom_rows_util import MiB, live_framework_bytes, oom_rows, run

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Without oom in the analyses."""
    return {mode: run(tmp_path_factory.mktemp(mode + "_plain"), mode == "cli", None) for mode in ("api", "cli")}


@pytest.mark.parametrize("mode", ["api", "cli"])
def test_rows_without_oom_analysis(plain, mode):
    rows = plain[mode]
    got = oom_rows(rows)
    assert [(r["Event"], r["Event Type"], r["Name"]) for r in got] == [("SNAPSHOT", "SNAPSHOT", "OOM_Snapshot")]
    assert not [r for r in rows if r["Event"] == "OOM_DETAIL"]
    [snap] = got
    assert (snap["Process Id"], snap["Thread Id"], snap["Device Id"]) == (snap["Process Id"], snap["Process Id"], "cpu")
    # written at the failure: after the four tensors, before the end of collection
    ids = [int(r["ID"]) for r in rows]
    assert ids == sorted(ids)
    tensors = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]
    assert len(tensors) == 4 and int(tensors[-1]["ID"]) < int(snap["ID"])
    stop = [r for r in rows if r["Event Type"] == "STOP_TRACE"]
    assert stop and int(snap["ID"]) < int(stop[0]["ID"])
    a = snap["attr"]
    assert a["allocated"] == a["max_allocated"] == a["reserved"] == a["max_reserved"] == str(4 * MiB), a
    assert live_framework_bytes(rows, int(snap["ID"])) == 4 * MiB
    assert a["reserved_rate"] == "100.000000"
    # the same numbers as the oom analysis writes (test_oom_rows.py): the binding memory bound
    check_snapshot_bound(a)


def test_python_api_and_cli_without_oom_write_the_same_rows(plain):
    # (the free memory, and the used share with it, is each run's own)
    kinds = {m: [(r["Event"], r["Event Type"], r["Name"],
                  {k: v for k, v in r["attr"].items() if k not in ("free", "device_rate")}) for r in oom_rows(rows)]
             for m, rows in plain.items()}
    assert kinds["api"] == kinds["cli"]
