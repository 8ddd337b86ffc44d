"""The OOM-killer tests (issue 3 §4, issue #20 item 5), shared by
test_capture_oom_killer_v1.py (cgroup v1 memory controller) and
test_capture_oom_killer_v2.py (cgroup v2): one ctest entry per cgroup
version, so that the one this machine cannot run shows as Skipped (with its
reason in the output) while the other runs.

The target (tests/programs/capture/cap_crash.c, mode oom) moves itself into
a memory cgroup limited to 128 MiB and touches memory until the kernel's OOM
killer kills it (SIGKILL); the host, which looks at the cgroups of the
process (framework/host/process_run.cpp, OomWatch: memory.oom_control for
v1, memory.events for v2), says it was the OOM killer."""
import os
import uuid
from pathlib import Path

import pytest

from capture_util import assert_nothing_lost, sizes, summary_blocks, summary_list
from conftest import process_dirs

N = 5000
LIMIT = 128 << 20


def _mounts():
    """(fstype, mount point, super options) of every cgroup file system."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
                out.append((rfields[0], Path(fields[4]), rfields[2]))
    return out


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def make_v1(limit=LIMIT):
    """A fresh child of the v1 memory hierarchy limited to limit bytes
    (None: not limited): (path, counter file, None) or (None, None, why
    not)."""
    roots = [p for t, p, sup in _mounts() if t == "cgroup" and "memory" in sup.split(",")]
    if not roots:
        return None, None, "no cgroup v1 memory hierarchy is mounted here (/proc/self/mountinfo)"
    root = roots[0]
    if not os.access(root, os.W_OK):
        return None, None, f"the cgroup v1 memory hierarchy {root} is not writable (run as root)"
    d = root / f"msms_test_{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        if limit is not None:
            _write(d / "memory.limit_in_bytes", str(limit))
        if (d / "memory.swappiness").exists():
            _write(d / "memory.swappiness", "0")
    except OSError as e:
        remove(d)
        return None, None, f"cannot make a limited cgroup under {root}: {e}"
    return d, d / "memory.oom_control", None


def make_v2():
    """The same in the cgroup v2 hierarchy (memory.max, no swap)."""
    roots = [p for t, p, _ in _mounts() if t == "cgroup2"]
    if not roots:
        return None, None, "no cgroup v2 hierarchy is mounted here (/proc/self/mountinfo)"
    root = roots[0]
    controllers = (root / "cgroup.controllers").read_text().split() if (root / "cgroup.controllers").exists() else []
    if "memory" not in controllers:
        v1 = [str(p) for t, p, sup in _mounts() if t == "cgroup" and "memory" in sup.split(",")]
        return None, None, (f"the cgroup v2 hierarchy at {root} has no memory controller (controllers: "
                            f"{' '.join(controllers) or 'none'})" +
                            (f"; the memory controller is bound to the v1 hierarchy at {v1[0]}" if v1 else ""))
    if not os.access(root, os.W_OK):
        return None, None, f"the cgroup v2 hierarchy {root} is not writable (run as root)"
    try:
        if "memory" not in (root / "cgroup.subtree_control").read_text().split():
            _write(root / "cgroup.subtree_control", "+memory")
    except OSError as e:
        return None, None, f"cannot enable the memory controller for the children of {root}: {e}"
    d = root / f"msms_test_{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        _write(d / "memory.max", str(LIMIT))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
    except OSError as e:
        remove(d)
        return None, None, f"cannot make a limited cgroup under {root}: {e}"
    return d, d / "memory.events", None


def remove(d):
    try:
        d.rmdir()
    except OSError:
        pass


def oom_kills(counter):
    """The 'oom_kill N' count of memory.oom_control (v1) / memory.events (v2)."""
    lines = [l for l in counter.read_text().splitlines() if l.startswith("oom_kill ")]
    assert lines, f"{counter} has no oom_kill line:\n{counter.read_text()}"
    return int(lines[0].split()[1])


def check_blocks(procdir):
    got = sorted(s for s in sizes(procdir) if 10000 <= s < 10000 + N)
    assert got == list(range(10000, 10000 + N))


def cgroup(make):
    cg, counter, why = make()
    if cg is None:
        pytest.skip(why)
    return cg, counter


def root_process_killed(make, cli, test_bin, tmp_path):
    """The program the CLI started is killed by the OOM killer."""
    cg, counter = cgroup(make)
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
        # and the kernel counted the kill in that cgroup
        assert oom_kills(counter) >= 1
    finally:
        remove(cg)


def child_process_killed(make, cli, test_bin, tmp_path):
    """The same for a process further down the tree: no end record
    (SIGKILL) and its cgroup counted an OOM kill; the shell that started it,
    in the test's own cgroup, was not killed."""
    cg, counter = cgroup(make)
    try:
        p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
                 "bash", "-c", f"{test_bin}/cap_crash oom {N} {cg}; true"], tmp_path, check_rc=0)
        assert_nothing_lost(p.stdout)
        blocks = summary_list(p.stdout)
        mine = [b for _, b in blocks if b[0].split(" (", 1)[1].startswith(f"{test_bin}/cap_crash ")]
        assert len(mine) == 1, p.stdout
        assert mine[0][0].endswith(") killed by the OOM killer (SIGKILL)"), mine[0][0]
        others = [b[0] for _, b in blocks if b[0] != mine[0][0]]
        assert others and all("OOM killer" not in l for l in others), p.stdout
        assert oom_kills(counter) >= 1
    finally:
        remove(cg)
