"""Issue 3 §4: a program that dies (SIGKILL, segfault, _exit, OOM kill,
abort after malloc failure) loses nothing it recorded, its files are complete,
and the summary says how it ended -- for the program the CLI started (its
wait status) and for a process further down the tree (what its agent saw)."""
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

from capture_util import assert_nothing_lost, iter_rows, only_dump, sizes, summary_blocks, summary_list
from conftest import process_dirs

N = 5000

CASES = {
    "sigkill": (137, "killed by signal 9 (SIGKILL)", "ended without an end record (killed by SIGKILL or the OOM killer)"),
    "segv": (139, "killed by signal 11 (SIGSEGV)", "killed by signal 11 (SIGSEGV)"),
    "_exit": (7, "exited with code 7", "exited with code 7 (_exit)"),
    "exit": (5, "exited with code 5", "exited with code 5"),
    "abort": (134, "killed by signal 6 (SIGABRT)", "killed by signal 6 (SIGABRT)"),
    "rlimit": (134, "killed by signal 6 (SIGABRT)", "killed by signal 6 (SIGABRT)"),
}


def check_blocks(procdir):
    got = sorted(s for s in sizes(procdir) if 10000 <= s < 10000 + N)
    assert got == list(range(10000, 10000 + N))


@pytest.mark.parametrize("mode", sorted(CASES))
def test_root_process_dies(cli, test_bin, tmp_path, mode):
    rc, how, _ = CASES[mode]
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             test_bin / "cap_crash", mode, N], tmp_path)
    assert p.returncode == rc, p.stderr
    assert_nothing_lost(p.stdout)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1
    pid = int(dirs[0].name.split("_")[1])
    assert summary_blocks(p.stdout)[pid][0].endswith(") " + how)
    check_blocks(dirs[0])


@pytest.mark.parametrize("mode", sorted(CASES))
def test_child_process_dies(cli, test_bin, tmp_path, mode):
    """The dying process is not the one the CLI started: its agent's record
    of the end is all the host has."""
    _, _, how = CASES[mode]
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             "bash", "-c", f"{test_bin}/cap_crash {mode} {N}; true"], tmp_path, check_rc=0)
    assert_nothing_lost(p.stdout)
    mine = [b for _, b in summary_list(p.stdout) if b[0].split(" (", 1)[1].startswith(f"{test_bin}/cap_crash ")]
    assert len(mine) == 1, p.stdout
    assert mine[0][0].endswith(") " + how), mine[0][0]
    d = [x for x in process_dirs(tmp_path / "out") if x.name.endswith("_exec1")]
    assert len(d) == 1
    check_blocks(d[0])


def memory_cgroup():
    root = Path("/sys/fs/cgroup/memory")
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        return None
    d = root / f"msms_test_{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        (d / "memory.limit_in_bytes").write_text(str(128 << 20))
        if (d / "memory.swappiness").exists():
            (d / "memory.swappiness").write_text("0")
    except OSError:
        return None
    return d


def test_oom_killed_in_memory_cgroup(cli, test_bin, tmp_path):
    """The target moves itself into a memory cgroup (v1) limited to 128 MiB
    and touches memory until the kernel's OOM killer kills it (SIGKILL); the
    summary says it was the OOM killer."""
    cg = memory_cgroup()
    if cg is None:
        pytest.skip("no writable memory cgroup here (the rlimit case covers the abort-on-OOM path)")
    try:
        p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
                 test_bin / "cap_crash", "oom", N, cg], tmp_path)
        assert p.returncode == 137, (p.returncode, p.stderr)
        assert_nothing_lost(p.stdout)
        dirs = process_dirs(tmp_path / "out")
        assert len(dirs) == 1
        pid = int(dirs[0].name.split("_")[1])
        # the host saw the cgroup's oom_kill count grow while the process was in it
        assert summary_blocks(p.stdout)[pid][0] == (
            f"msmemscope: pid {pid} ({test_bin / 'cap_crash'} oom {N} {cg}) killed by the OOM killer (SIGKILL)")
        check_blocks(dirs[0])
        # the 16 MiB blocks it got before the kill are there too
        assert sizes(dirs[0]).count(16 << 20) >= 1
        oom_kills = [l for l in (cg / "memory.oom_control").read_text().splitlines() if l.startswith("oom_kill ")]
        if oom_kills:
            assert int(oom_kills[0].split()[1]) >= 1
    finally:
        try:
            cg.rmdir()
        except OSError:
            pass


def test_oom_killed_child_in_memory_cgroup(cli, test_bin, tmp_path):
    """The same, for a process further down the tree: no end record (SIGKILL)
    and its cgroup counted an OOM kill."""
    cg = memory_cgroup()
    if cg is None:
        pytest.skip("no writable memory cgroup here (the rlimit case covers the abort-on-OOM path)")
    try:
        p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
                 "bash", "-c", f"{test_bin}/cap_crash oom {N} {cg}; true"], tmp_path, check_rc=0)
        assert_nothing_lost(p.stdout)
        blocks = summary_list(p.stdout)
        mine = [b for _, b in blocks if b[0].split(" (", 1)[1].startswith(f"{test_bin}/cap_crash ")]
        assert len(mine) == 1, p.stdout
        assert mine[0][0].endswith(") killed by the OOM killer (SIGKILL)"), mine[0][0]
        # the shell that started it, in the test's own cgroup, did not
        others = [b[0] for _, b in blocks if b[0] != mine[0][0]]
        assert others and all("OOM killer" not in l for l in others), p.stdout
    finally:
        try:
            cg.rmdir()
        except OSError:
            pass
