"""The OOM_Snapshot_After row (ours: upstream's docs promise snapshots
before and after a failure) is written at the device's next memory event,
once that event has applied, and its numbers are the memory then: free is
the failure's free moved by the bytes the device's blocks gave back or took
since (before, it repeated the failure's free whatever the program did).
Workload: a C program whose malloc fails under the RLIMIT_AS it set, which
then frees an 8 MiB block and allocates 2 MiB again."""
import re

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli
from sinks_common import only


def test_after_row_says_the_memory_the_program_gave_back(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=oom:1", "--output=out", "--", TEST_BIN / "analyzers_oom_recover"],
                tmp_path, check_rc=0)
    m = re.search(r"RLIMIT_AS (\d+), VmSize (\d+) before the failure, (\d+) after the free", p.stdout)
    assert m, p.stdout
    limit, vm_before, vm_freed = (int(g) for g in m.groups())
    rows = read_dump(only(dump_files(only(process_dirs(tmp_path / "out")))))
    [snap] = [r for r in rows if r["Name"] == "OOM_Snapshot"]
    [after] = [r for r in rows if r["Name"] == "OOM_Snapshot_After"]
    [freed] = [r for r in rows if r["Event"] == "FREE" and r["attr"].get("size") == str(8 << 20)]
    # written at the program's free, which is in its numbers
    assert int(after["ID"]) > int(freed["ID"])
    assert after["Timestamp(ns)"] == freed["Timestamp(ns)"]
    s, a = snap["attr"], after["attr"]
    assert (a["limit"], int(a["total"])) == (s["limit"], int(s["total"])) == ("RLIMIT_AS", limit)
    assert int(a["allocated"]) == int(s["allocated"]) - (8 << 20)
    assert int(a["free"]) == int(s["free"]) + (8 << 20)
    assert a["device_rate"] == "%f" % (100.0 * (limit - int(a["free"])) / limit)
    # and near what the kernel says then (the rows do not count the block's
    # header page, nor what the profiler's agent maps for itself meanwhile),
    # where the failure's free was 8 MiB less
    assert abs(int(a["free"]) - (limit - vm_freed)) <= 1 << 20, (a["free"], limit - vm_freed)
    assert abs(int(s["free"]) - (limit - vm_freed)) > 7 << 20
