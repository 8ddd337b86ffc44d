"""Issue 3 §4: a program that dies (SIGKILL, segfault, _exit, abort after
malloc failure) loses nothing it recorded, its files are complete,
and the summary says how it ended -- for the program the CLI started (its
wait status) and for a process further down the tree (what its agent saw).
The OOM killer's kills: test_capture_oom_killer_v1.py / _v2.py."""
import json

import pytest

from capture_util import assert_nothing_lost, sizes, summary_blocks, summary_list
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
    # summary.json (what --merge reads) says the same. The program killed by
    # SIGKILL has no end record: its folder's worker waits for the CLI's wait
    # status, which it said "ended without an end record" without. The other
    # ends are the agent's record, which knows _exit from exit.
    ended = json.loads((dirs[0] / "summary.json").read_text())["ended"]
    if mode == "sigkill":
        assert ended == {"how": "signal", "code": None, "signal": 9, "text": how}, ended
    else:
        assert ended["text"] == CASES[mode][2], ended


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
