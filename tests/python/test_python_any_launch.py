"""Python is profiled as Python however it is started (issue #28 item 1,
DESIGN §9): the agent in each process of the run starts the Python side when
the process is a CPython interpreter, so a program reached through a shell
script, sh -c, env, nohup, xargs, a #! line, a symlinked interpreter or
`python -m` gets the same Python stacks, import folding and PyTorch
collection as `msmemscope -- python3 x.py`, and sees its own PYTHONPATH.
"""
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import DUMP_HEADER, SOURCE, dump_files, process_dirs, run_cli

PROGRAMS = SOURCE / "tests" / "programs" / "python" / "launch"
FORMS = ["bash", "sh", "env", "nohup", "xargs", "shebang", "symlink", "module"]
BLOCK = (3 << 20) + 1  # prog.py's bytearray


def workdir(tmp_path):
    for f in PROGRAMS.iterdir():
        shutil.copy(f, tmp_path / f.name)
    text = (PROGRAMS / "prog.py").read_text()
    shebang = tmp_path / "shebang.py"
    shebang.write_text("#!/usr/bin/env python3\n" + text)
    shebang.chmod(0o755)
    (tmp_path / "py").symlink_to("/usr/bin/python3")
    return tmp_path


def env(**extra):
    # Debian's python3 first, whatever python3 the caller's PATH prefers.
    e = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": ""}
    e.update(extra)
    return e


def tags(stdout):
    """form -> (pid, PYTHONPATH the program saw, PYTHONPATH its sh child saw)."""
    out = {}
    for form, pid, own, child in re.findall(r"^TAG (\S+) (\d+) (.+) ('.*')$", stdout, re.M):
        out[form] = (int(pid), own, child)
    return out


def python_dir(out, pid):
    """The process folder of the Python program with this pid (a program
    exec'ed by a shell keeps the shell's pid: its folder is the _execN one)."""
    dirs = [d for d in process_dirs(out) if d.name.split("_")[1] == str(pid)]
    assert dirs, f"no folder for pid {pid} in {[d.name for d in process_dirs(out)]}"
    return max(dirs, key=lambda d: d.name)


def stack_of_block(dump):
    """The Python stack of prog.py's 3 MiB MALLOC row in this dump."""
    import csv
    with open(dump, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            if rec[1] == "MALLOC" and rec[2] == "HOST" and f"size:{BLOCK}," in rec[9]:
                return rec[10]
    return None


@pytest.mark.parametrize("user_path", [None, "/nonexistent/own-dir"], ids=["unset", "own"])
def test_every_launch_form_is_profiled_as_python(tmp_path, user_path):
    wd = workdir(tmp_path)
    extra = {} if user_path is None else {"PYTHONPATH": user_path}
    e = env(**extra)
    if user_path is None:
        e["PYTHONPATH"] = ""  # run_cli merges os.environ: drop the caller's value
    p = run_cli(["--device=cpu", "--call-stack=python", "--events=alloc,free", "--analysis=",
                 "--output=out", "bash", "all.sh"], wd, env=e, check_rc=0)
    seen = tags(p.stdout)
    assert sorted(seen) == sorted(FORMS), p.stdout + p.stderr
    expected_own = repr(user_path if user_path is not None else "")
    for form in FORMS:
        pid, own, child = seen[form]
        # the program and its children see the PYTHONPATH they were given
        assert own == expected_own, (form, own)
        assert child == repr(user_path if user_path is not None else ""), (form, child)
        d = python_dir(wd / "out", pid)
        (dump,) = dump_files(d)
        stack = stack_of_block(dump)
        assert stack is not None, f"{form}: no row for the {BLOCK}-byte block in {dump}"
        # Python stacks: the line in make() and the module line that called it
        frames = stack.split("\n")
        line = {"shebang": ("shebang", 11, 14)}.get(form, ("prog", 10, 13))
        assert re.fullmatch(r".*/%s\.py\(%d\): make" % line[:2], frames[0]), (form, stack)
        assert re.fullmatch(r".*/%s\.py\(%d\): <module>" % (line[0], line[2]), frames[1]), (form, stack)


def host_rows(dump):
    with open(dump) as f:
        return sum(1 for line in f) - 1


def test_torch_through_bash_costs_what_it_costs_directly(tmp_path):
    pytest.importorskip("torch")
    wd = workdir(tmp_path)
    args = ["--device=cpu", "--events=alloc,free,launch", "--analysis="]
    run_cli(args + ["--output=direct", "--", "/usr/bin/python3", "torch_prog.py"], wd,
            env=env(PYTHONPATH=""), check_rc=0)
    p = run_cli(args + ["--output=bash", "--", "bash", "-c", "python3 torch_prog.py"], wd,
                env=env(PYTHONPATH=""), check_rc=0)
    assert "loss" in p.stdout

    def summary(out):
        # the Python process: the one whose dump has operators (bash's has host rows only)
        d = [d for d in process_dirs(wd / out) if dump_files(d) and ",ATEN_START," in Path(dump_files(d)[0]).read_text()]
        assert len(d) == 1, [x.name for x in process_dirs(wd / out)]
        (dump,) = dump_files(d[0])
        pta, ops, rows = 0, set(), 0
        with open(dump) as f:
            next(f)
            for line in f:
                rows += 1
                if ",PTA," in line and ",MALLOC," in line:
                    pta += 1
                elif ",ATEN_START," in line:
                    ops.add(line.split(",")[3])
        return pta, ops, rows

    d_pta, d_ops, d_rows = summary("direct")
    b_pta, b_ops, b_rows = summary("bash")
    assert d_pta > 0 and "torch._ops.aten.addmm.default" in d_ops
    # the same tensors and operators
    assert (b_pta, b_ops) == (d_pta, d_ops)
    # import folding works through bash too: without it `import torch` alone
    # gives about three times the rows
    assert abs(b_rows - d_rows) <= d_rows * 0.02, (b_rows, d_rows)


def test_torchrun_below_bash_profiles_every_rank(tmp_path):
    pytest.importorskip("torch.distributed")
    wd = workdir(tmp_path)
    # --redirects/--tee 1: torch 1.13's default "0" is not a member of its Std
    # flag enum under Python 3.11 (torchrun fails before starting a worker).
    (wd / "ddp.sh").write_text("python3 -m torch.distributed.run --standalone --nproc_per_node=2 "
                               "--redirects=1 --tee=1 ddp.py\n")
    p = run_cli(["--device=cpu", "--call-stack=python", "--events=alloc,free,launch", "--analysis=",
                 "--output=out", "bash", "ddp.sh"], wd, env=env(PYTHONPATH=""), timeout=300, check_rc=0)
    assert "rank 0 done" in p.stdout and "rank 1 done" in p.stdout, p.stdout + p.stderr
    ranks = sorted(d for d in process_dirs(wd / "out") if "_rank" in d.name)
    assert [d.name.rsplit("_", 1)[1] for d in ranks] == ["rank0", "rank1"], [d.name for d in process_dirs(wd / "out")]
    for d in ranks:
        (dump,) = dump_files(d)
        pta = with_stack = 0
        with open(dump) as f:
            for line in f:
                if ",MALLOC,PTA," in line:
                    pta += 1
                    with_stack += "ddp.py(12): <module>" in line
        # each rank's tensors, those of the forward line with that line
        # (DDP's reducer allocates from threads without Python frames)
        assert pta > 50 and with_stack >= 5, (d.name, pta, with_stack)
