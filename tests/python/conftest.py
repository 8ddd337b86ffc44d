"""Shared fixtures for the pytest suites.

MSMEMSCOPE_BUILD points at the CMake build tree (ctest sets it); the CLI is
build/bin/msmemscope, test programs are in build/tests/bin.
"""
import csv
import ctypes
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("MSMEMSCOPE_BUILD", Path(__file__).resolve().parents[2] / "build")).resolve()
SOURCE = Path(os.environ.get("MSMEMSCOPE_SOURCE", Path(__file__).resolve().parents[2])).resolve()
CLI = BUILD / "bin" / "msmemscope"
TEST_BIN = BUILD / "tests" / "bin"

DUMP_HEADER = ["ID", "Event", "Event Type", "Name", "Timestamp(ns)", "Process Id", "Thread Id",
               "Device Id", "Ptr", "Attr", "Call Stack(Python)", "Call Stack(C)"]


def run_cli(args, cwd, env=None, timeout=600, check_rc=None, preexec_fn=None):
    """Runs msmemscope with args (a list); returns CompletedProcess (text).
    preexec_fn: run in the CLI's process before it starts (e.g. to move it
    into a cgroup)."""
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if env:
        e.update(env)
    p = subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e,
                       capture_output=True, text=True, timeout=timeout, preexec_fn=preexec_fn)
    if check_rc is not None:
        assert p.returncode == check_rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def parse_attr(text):
    """'{k:v,k:[1, 2]}' -> dict; commas inside brackets stay in values."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    out, depth, start = {}, 0, 0
    items = []
    for i, c in enumerate(text):
        if c in "[{(":
            depth += 1
        elif c in "]})" and depth:
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    for it in items:
        if not it:
            continue
        k, _, v = it.partition(":")
        out[k.strip()] = v
    return out


def read_dump(path):
    """Reads a memscope_dump CSV; returns a list of dict rows with 'attr' parsed."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        assert header == DUMP_HEADER, header
        rows = []
        for rec in r:
            d = dict(zip(header, rec))
            d["attr"] = parse_attr(d["Attr"])
            rows.append(d)
        return rows


def _loadable(lib):
    try:
        ctypes.CDLL(lib)
        return True
    except OSError:
        return False


# the tests of what is said when no Ascend driver is found
no_ascend = pytest.mark.skipif(_loadable("libascend_hal.so"), reason="an Ascend driver is installed here")


def clean_env(**extra):
    """The environment for a Python API run without the CLI: no preload or session of
    this test's own run, the package from the build."""
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    e.update(extra)
    return e


def process_dirs(out):
    return sorted(p for p in Path(out).iterdir() if p.is_dir() and p.name.startswith("msmemscope_"))


def log_messages(procdir):
    """The process folder's log (msmemscope_logs/msmemscope_<ts>.log) as
    (time, "[level] message") pairs, the logger's name left out."""
    logs = list((Path(procdir) / "msmemscope_logs").glob("msmemscope_*.log"))
    assert len(logs) == 1, logs
    pairs = []
    for line in logs[0].read_text().splitlines():
        m = re.match(r"^\[([^]]*)\] \[msmemscope\] (.*)$", line)
        if m:
            pairs.append((m.group(1), m.group(2)))
        elif pairs:  # a message of several lines
            pairs[-1] = (pairs[-1][0], pairs[-1][1] + "\n" + line)
    return pairs


def dump_files(procdir, device="cpu", kind="memscope_dump"):
    return sorted((Path(procdir) / f"device_{device}" / "dump").glob(f"{kind}_*.csv"))


def run_with_user_site(work, installed, program, args, mode="fold", files=None, env=None):
    """Runs `program` (work/prog.py, Debian's python3) under the CLI with `args`
    (which write to work/out), with the modules of `installed` in a user
    site-packages of its own (PYTHONUSERBASE: part of the Python installation,
    so their imports are import scopes) and `files` beside the program; both
    map file names to sources (dedented). mode "record": the imports' host
    blocks are not folded; `env`: more environment. Returns (the
    CompletedProcess, the process's output folder, the site-packages folder)."""
    site = work / "userbase" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name, text in installed.items():
        (site / name).write_text(textwrap.dedent(text), encoding="utf-8")
    for name, text in (files or {}).items():
        (work / name).write_text(textwrap.dedent(text), encoding="utf-8")
    (work / "prog.py").write_text(textwrap.dedent(program), encoding="utf-8")
    if mode == "record":
        args = args + ["--plugin-option=host_heap.python_imports=record"]
    p = run_cli(args + ["--", "/usr/bin/python3", "prog.py"], work,
                env={"PYTHONUSERBASE": str(work / "userbase"), **(env or {})}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    (procdir,) = process_dirs(work / "out")
    return p, procdir, site


def pta_mallocs_of(procdir):
    """The PTA MALLOC rows of a process's dump (dicts by DUMP_HEADER, "attr"
    parsed); no other row is parsed (with python_imports=record the dump holds
    every row of `import torch` with its stacks)."""
    (dump,) = dump_files(procdir)
    with open(dump, newline="") as f:
        rows = [dict(zip(DUMP_HEADER, rec)) for rec in csv.reader(f) if rec[1:3] == ["MALLOC", "PTA"]]
    for r in rows:
        r["attr"] = parse_attr(r["Attr"])
    return rows


@pytest.fixture
def cli():
    assert CLI.exists(), f"build first: {CLI} is missing"
    return run_cli


@pytest.fixture
def test_bin():
    return TEST_BIN


# A file whose every test was skipped could not run here: its pytest run
# exits with 77, which ctest (SKIP_RETURN_CODE, tests/CMakeLists.txt) shows
# as "Skipped" instead of "Passed"; the reasons are in its output (-rs).
ALL_SKIPPED_EXIT = 77
_outcomes = {"skipped": 0, "other": 0}


def pytest_runtest_logreport(report):
    if report.skipped:
        _outcomes["skipped"] += 1
    elif report.when == "call" or report.failed:
        _outcomes["other"] += 1


def pytest_collectreport(report):
    if report.skipped:  # a whole module skipped (e.g. pytest.importorskip)
        _outcomes["skipped"] += 1


def pytest_sessionfinish(session, exitstatus):
    # 5: nothing collected (a module skipped as a whole)
    if exitstatus in (0, 5) and _outcomes["skipped"] and not _outcomes["other"]:
        session.exitstatus = ALL_SKIPPED_EXIT


def descendants(pid):
    """pid and every process below it (from /proc), parents first."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def stacks_of(pid):
    """What pid and its descendants are doing: command line, state, and every
    thread's stack (gdb), for a test that timed out to say where it hung."""
    lines = []
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{p}/status") as f:
                state = next((l.strip() for l in f if l.startswith("State:")), "")
        except OSError:
            continue
        lines.append(f"--- pid {p}: {cmd} [{state}]")
        try:
            r = subprocess.run(["gdb", "-batch", "-nx", "-p", str(p), "-ex", "thread apply all bt 30"],
                               capture_output=True, text=True, timeout=60)
            lines += [l for l in r.stdout.splitlines() if l.startswith(("#", "Thread"))]
        except (OSError, subprocess.TimeoutExpired) as e:
            lines.append(f"(no stack: {e})")
    return "\n".join(lines)


def communicate_or_explain(p, timeout):
    """p.communicate(timeout), but a run that does not end in time fails with
    the stacks of the CLI and everything it started, then is killed."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        where = stacks_of(p.pid)
        for q in reversed(descendants(p.pid)):
            try:
                os.kill(q, 9)
            except OSError:
                pass
        out, err = p.communicate()
        pytest.fail(f"the run did not end within {timeout} s\nstderr:\n{err}\nstdout:\n{out}\nstacks:\n{where}")
