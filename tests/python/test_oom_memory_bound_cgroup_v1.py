"""A cpu allocation failure in a cgroup v1 memory cgroup (Docker's
`--memory` on a host with the v1 or the hybrid layout): the OOM_Snapshot
row's bound is that cgroup's memory.limit_in_bytes (limit:cgroup, as a v2
memory.max is), its free the limit less memory.usage_in_bytes at the
failure; a limit set on the cgroup above binds too. Before, the agent read
cgroup v2 only and said RLIMIT_AS here. Skipped, with the reason, where this
machine has no writable v1 memory hierarchy (see oom_cgroup.py).

The program (tests/programs/analyzers/oom.c) touches 36 MiB, then its
malloc fails under the 4 GiB RLIMIT_AS it set itself, with far more than the
cgroup's free memory left under that: the cgroup binds."""
import json
import os
import subprocess
import sys

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli
from memory_bound_util import is_no_limit
import oom_cgroup
from sinks_common import only
from test_html_oom import cells, dom, human, oom_rows
from test_html_truth import page_data

LIMIT = 512 << 20
TOUCHED = sum(i << 20 for i in range(1, 9))  # what the program keeps, written to, before the failure


def _number(path):
    return int(path.read_text().strip())


def _mover(cg):
    """A preexec_fn: the new process moves itself into cgroup cg."""
    def move_into_cgroup():
        with open(cg / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    return move_into_cgroup


def _run_in(cg, tmp_path):
    """The CLI (and so the program it starts) run inside cgroup cg."""
    p = run_cli(["--device=cpu", "--analysis=oom", "--sinks=csv,html", "--output=out", "--",
                 TEST_BIN / "analyzers_oom"], tmp_path, check_rc=3, preexec_fn=_mover(cg))
    assert "malloc failed as expected" in p.stdout
    return only(process_dirs(tmp_path / "out"))


def _check_bound(d, tmp_path, limited):
    """The snapshot's bound is limited's limit, its free the limit less a use
    between what the program touched and the cgroup's peak use."""
    peak = _number(limited / "memory.max_usage_in_bytes")
    [snap] = oom_rows(read_dump(only(dump_files(d))), "OOM_Snapshot")
    a = snap["attr"]
    assert (a["limit"], int(a["total"])) == ("cgroup", LIMIT), a
    free = int(a["free"])
    assert LIMIT - peak <= free <= LIMIT - TOUCHED, (free, LIMIT - peak, LIMIT - TOUCHED)
    assert a["device_rate"] == "%f" % (100.0 * (LIMIT - free) / LIMIT)

    page = only(d.glob("report_*.html"))
    [f] = page_data(page)["oom"]["listed"]
    assert (f["total"], f["free"], f["limit"]) == (LIMIT, free, "cgroup")
    [row] = cells(dom(page, tmp_path), "table-oom")
    assert row[5] == f"{human(free)} of 512 MiB, the memory cgroup's limit"


def test_limit_of_the_process_cgroup(tmp_path):
    cg, _ = oom_cgroup.cgroup(lambda: oom_cgroup.make_v1(LIMIT))
    try:
        d = _run_in(cg, tmp_path)
        _check_bound(d, tmp_path, cg)
    finally:
        oom_cgroup.remove(cg)


def test_limit_of_the_cgroup_above(tmp_path):
    """The process's own cgroup has no limit; the one above it has."""
    parent, _ = oom_cgroup.cgroup(lambda: oom_cgroup.make_v1(LIMIT))
    child = parent / "job 1"  # a space: escaped nowhere in /proc/self/cgroup, but a path to get right
    try:
        child.mkdir()
        assert is_no_limit(_number(child / "memory.limit_in_bytes"))
        d = _run_in(child, tmp_path)
        _check_bound(d, tmp_path, parent)
    finally:
        oom_cgroup.remove(child)
        oom_cgroup.remove(parent)


def test_the_tests_expected_bound_reads_v1_too():
    """memory_bound_util (the other tests' expectation of the bound, e.g.
    test_oom_memory_bound.py's) reads v1 limits too: in a process in the
    limited cgroup, it finds that limit."""
    cg, _ = oom_cgroup.cgroup(lambda: oom_cgroup.make_v1(LIMIT))
    try:
        code = "import json, memory_bound_util as m; print(json.dumps(m.bounds(rlimits=False)))"
        p = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.abspath(__file__)),
                           capture_output=True, text=True, preexec_fn=_mover(cg))
        assert p.returncode == 0, p.stderr
        assert [t for t, _ in json.loads(p.stdout)["cgroup"]] == [LIMIT], p.stdout
    finally:
        oom_cgroup.remove(cg)
