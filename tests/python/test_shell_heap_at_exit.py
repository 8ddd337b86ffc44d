"""A launcher shell's own heap at exit is not the program's leak.

Upstream recommends `msmemscope ... bash user.sh` for Python programs; every
process of the tree is profiled, the shell too, and a shell frees none of its
heap before it exits (bash holds about 750 blocks then). That heap was the
shell's row's "leaked" figure in the console table and index.html, sending a
PyTorch user after a leak that is not theirs. Now its report says it on a line
of its own and its leaked figure leaves it out; a program the shell runs that
really leaks is still "leaked" (the control)."""
import html
import json
import re

import pytest

from conftest import TEST_BIN, process_dirs, run_cli

PY = "/usr/bin/python3"
TRAIN = "import torch\nx = torch.ones(1000)\nprint('sum', float(x.sum()))\n"

SHELL_LINE = re.compile(r"^  Host memory of the shell still allocated at exit on device cpu: (\d+) block\(s\), "
                        r"(\d+) bytes \(([\w ]+)'s own heap: a shell does not free it before it exits; not counted "
                        r"as leaked\)$", re.M)
TABLE_ROW = re.compile(r"^  (\d+) +(\S+) +(\S+) +(.+?)  +(.+?)  +(cpu/\S+ [\d.]+ \w+(?:; cpu/\S+ [\d.]+ \w+)*) +(\S.*)$")
INDEX_ROW = re.compile(r'<tr><td class="n">(\d+)</td><td class="n">[^<]*</td><td>[^<]*</td><td>([^<]*)</td>'
                       r'<td>([^<]*)</td><td>[^<]*</td><td class="n">([^<]*)</td>')
SHELL_INDEX = "0 B in 0 allocation(s) (a shell: its own heap at exit is not counted)"


class Run:
    """One CLI run: its console per process, its table rows and index rows,
    each keyed by (command, how it ended)."""

    def __init__(self, tmp_path, command):
        p = run_cli(["--device=cpu", "--output=out", "--", *command], tmp_path, check_rc=0)
        self.out = p.stdout
        summaries = re.split(r"^msmemscope: \d+ processes$", self.out, flags=re.M)[0]
        self.blocks = {}
        for b in re.split(r"^msmemscope: pid ", summaries, flags=re.M)[1:]:
            m = re.match(r"(\d+) \((.*?)\) (.*)\n", b)
            self.blocks[(m[2], m[3])] = b
        m = re.search(r"^msmemscope: (\d+) processes\n  pid +ppid +rank +ended +leaked +peak +command\n((?:  \d+ .*\n)+)",
                      self.out, re.M)
        assert m, self.out
        self.table = {}
        for line in m[2].splitlines():
            f = TABLE_ROW.match(line)
            assert f, line
            self.table[(f[7], f[4])] = f[5]
        page = (tmp_path / "out" / "index.html").read_text()
        self.index = {(html.unescape(r[2]), html.unescape(r[3])): html.unescape(r[4]) for r in INDEX_ROW.finditer(page)}
        assert len(self.index) == len(self.table) == int(m[1]), page
        self.dirs = {json.loads((d / "summary.json").read_text())["pid"]: d for d in process_dirs(tmp_path / "out")}

    def summary(self, pid):
        return json.loads((self.dirs[pid] / "summary.json").read_text())


def pid_of(block):
    return int(block.split(" ", 1)[0])


def check_shell(run, command, shell):
    """The shell's row: its heap on a line of its own, 0 B leaked and why."""
    key = (command, "exited with code 0")
    block = run.blocks[key]
    m = SHELL_LINE.search(block)
    assert m, block
    assert m[3] == shell
    blocks, size = int(m[1]), int(m[2])
    assert blocks > 0 and size > 0
    assert "Host memory still allocated at exit" not in block, block
    assert run.table[key] == "0 B (shell)", run.out
    assert run.index[key] == SHELL_INDEX
    assert run.summary(pid_of(block))["leaks"] == {
        "bytes": 0, "allocations": 0, "exit_judged": True, "not_judged_before_start": {"blocks": 0, "bytes": 0},
        "shell_heap_at_exit": {"blocks": blocks, "bytes": size}}


def check_program_not_a_shell(run, command):
    key = (command, "exited with code 0")
    assert not SHELL_LINE.search(run.blocks[key]), run.blocks[key]
    assert "(shell)" not in run.table[key] and "a shell" not in run.index[key]
    assert "shell_heap_at_exit" not in run.summary(pid_of(run.blocks[key]))["leaks"]


def test_bash_user_sh_running_pytorch(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    # two commands after the program: bash forks it instead of exec'ing into it
    (tmp_path / "user.sh").write_text(f"echo start\n{PY} train.py\necho done\n")
    run = Run(tmp_path, ["bash", "user.sh"])
    assert "start\nsum 1000.0\ndone\n" in run.out
    check_shell(run, "/usr/bin/bash user.sh", "bash")
    # bash's child before its exec: no leaks, as before
    assert run.table[("/usr/bin/bash user.sh", "replaced by exec")] == "-"
    check_program_not_a_shell(run, f"{PY} train.py")


def test_sh_c_running_python(tmp_path):
    # /bin/sh is dash here: it vforks the program, and its own heap is said the same
    run = Run(tmp_path, ["sh", "-c", f"echo start; {PY} -c 'print(sum(range(10)))'; echo done"])
    assert "start\n45\ndone\n" in run.out
    check_shell(run, f"/usr/bin/sh -c echo start; {PY} -c 'print(sum(range(10)))'; echo done", "sh")
    check_program_not_a_shell(run, f"{PY} -c print(sum(range(10)))")


def test_program_that_leaks_under_bash_is_still_leaked(tmp_path):
    leak = TEST_BIN / "analyzers_host_leak"  # 10 blocks of 1000 bytes and 3 of 50 live at exit
    (tmp_path / "ctl.sh").write_text(f"echo start\n{leak}\necho done\n")
    run = Run(tmp_path, ["bash", "ctl.sh"])
    check_shell(run, "/usr/bin/bash ctl.sh", "bash")
    key = (str(leak), "exited with code 0")
    check_program_not_a_shell(run, str(leak))
    assert re.search(r"^  Host memory still allocated at exit on device cpu: \d+ block\(s\), \d+ bytes, from \d+ "
                     r"allocation site\(s\):$", run.blocks[key], re.M), run.blocks[key]
    leaks = run.summary(pid_of(run.blocks[key]))["leaks"]
    assert leaks["bytes"] >= 10150 and leaks["allocations"] >= 13, leaks
    assert re.fullmatch(r"[\d.]+ KiB", run.table[key]), run.out
    assert run.index[key] == f"{run.table[key]} in {leaks['allocations']} allocation(s)"
