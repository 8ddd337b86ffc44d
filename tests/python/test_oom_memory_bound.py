"""A cpu allocation failure's OOM_Snapshot row says how much memory the
process could have had and how much of it was free at the failure: the
binding one of its memory bounds (RLIMIT_AS, RLIMIT_DATA, a cgroup's
memory.max, the machine), read by the agent in the failing process at the
failure, and which it was (Attr limit, after upstream's keys, which are
unchanged; before, total:0,free:0). device_rate is its used share; the
OOM_Trigger row keeps upstream's keys; the html's out-of-memory table shows
the free memory and the bound. Workloads: a C program whose malloc fails
under the RLIMIT_AS it set itself, a PyTorch script asking for a 1 PiB
tensor with no rlimit."""
import re

import pytest

from conftest import dump_files, read_dump
from memory_bound_util import check_snapshot_bound
from oom_rows_util import oom_rows as failure_rows, run as run_torch_oom
from sinks_common import only
from test_html_oom import cells, dom, human, native_oom, oom_rows  # noqa: F401 (native_oom: the fixture)
from test_html_truth import page_data

UPSTREAM_SNAPSHOT_KEYS = ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free", "device_rate",
                          "reserved_rate"]


def test_c_program_under_rlimit_as(native_oom):
    tmp, p, d = native_oom
    m = re.search(r"RLIMIT_AS (\d+), VmSize (\d+) before, (\d+) after", p.stdout)
    assert m, p.stdout
    limit, vm_before, vm_after = (int(g) for g in m.groups())
    assert limit == 4 << 30
    rows = read_dump(only(dump_files(d)))
    [snap] = oom_rows(rows, "OOM_Snapshot")
    a = snap["attr"]
    assert list(a) == UPSTREAM_SNAPSHOT_KEYS + ["limit"]
    assert (a["limit"], int(a["total"])) == ("RLIMIT_AS", limit)
    free = int(a["free"])
    # the limit less the VmSize at the failure, which is between the two the program read around it
    assert limit - vm_after <= free <= limit - vm_before, (free, limit - vm_after, limit - vm_before)
    assert a["device_rate"] == "%f" % (100.0 * (limit - free) / limit)
    [trig] = oom_rows(rows, "OOM_TRIGGER")
    assert list(trig["attr"]) == ["func", "req_size", "flag", "ret"]

    page = only(d.glob("report_*.html"))
    [f] = page_data(page)["oom"]["listed"]
    assert (f["total"], f["free"], f["limit"]) == (limit, free, "RLIMIT_AS")
    [row] = cells(dom(page, tmp), "table-oom")
    assert row[5] == f"{human(free)} of 4.00 GiB, the address-space limit (RLIMIT_AS)"


def test_pytorch_huge_tensor_without_rlimit(tmp_path):
    pytest.importorskip("torch")
    rows = run_torch_oom(tmp_path, under_cli=True)
    [snap] = [r for r in failure_rows(rows) if r["Name"] == "OOM_Snapshot"]
    assert list(snap["attr"]) == UPSTREAM_SNAPSHOT_KEYS + ["limit"]
    # the machine's MemTotal where no other bound applies (a cgroup's memory.max where one does)
    check_snapshot_bound(snap["attr"])
    [trig] = [r for r in failure_rows(rows) if r["Event Type"] == "OOM_TRIGGER"]
    assert list(trig["attr"]) == ["func", "req_size", "flag", "ret"]
