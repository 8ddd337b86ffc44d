"""Pinned host memory (cuMemAllocHost, cuMemHostAlloc; aclrtMallocHost on an
NPU) is locked in RAM, so the process's RLIMIT_MEMLOCK bounds it besides
what bounds the rest of its memory. Its failure's OOM_Snapshot row weighs
that limit too (free: the limit less the process's locked memory, VmLck)
and names it: limit:RLIMIT_MEMLOCK. The workload calls the simulated CUDA
driver (tests/fixtures/cuda), which locks pinned memory as the real one
pins it and fails an allocation past RLIMIT_MEMLOCK with
CUDA_ERROR_OUT_OF_MEMORY: it sets a 64 KiB limit, locks 32 KiB, asks for
64 KiB more; then a malloc of 1 PiB fails, whose bound that limit is not."""
import re

from conftest import dump_files, read_dump
from cuda_helpers import run_cuda
from memory_bound_util import check_snapshot_bound
from sinks_common import only


def test_pinned_failure_is_bound_by_rlimit_memlock(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["pinned_oom"], device="cuda,cpu")
    m = re.search(r"pinned oom rc=(\d+) RLIMIT_MEMLOCK (\d+), VmLck (\d+) before, (\d+) after", p.stdout)
    assert m, p.stdout
    rc, limit, locked_before, locked_after = (int(g) for g in m.groups())
    assert (rc, limit, locked_before) == (2, 64 << 10, 32 << 10)
    assert locked_after == locked_before  # the failed call locked nothing: VmLck at the failure
    assert "malloc of 1 PiB failed" in p.stdout
    rows = read_dump(only(dump_files(d, "cpu")))
    pinned, pageable = [r["attr"] for r in rows if r["Name"] == "OOM_Snapshot"]
    assert (pinned["limit"], int(pinned["total"]), int(pinned["free"])) == (
        "RLIMIT_MEMLOCK", limit, limit - locked_before)
    assert pinned["device_rate"] == "%f" % (100.0 * locked_before / limit)
    assert "oom: cuMemHostAlloc of 65536 bytes failed on device cpu" in p.stderr
    # the malloc's bound is one of the others (64 KiB free would have bound it)
    assert pageable["limit"] != "RLIMIT_MEMLOCK"
    check_snapshot_bound(pageable)
