"""A run of several processes says each one's warnings about its events on
one console: with two ranks, rank 0's step leak warnings and rank 1's read
alike (an audit found it on a gloo run). Once the run has seen a second
process, such a line names its process: '[msmemscope] warning: [pid 4242,
rank 1] leaks: [device cpu][step 3]: ...', the rank when its environment had
one. Each process's log is its own and keeps upstream's words; a run of one
process (an exec keeps the pid) keeps them on the console too.

Naming turns on once it helps the reader (run_processes.h): a rank tells two
processes apart (two ranks differ, or a process has a rank its parent had
not), or a second process has a line to say. A one-process program's short
helpers (`uname -p`, `true`) name nothing, also when they inherit its RANK.
Errors, the line after a plugin crashed and what a plugin's finish() says
are named alike (a finish() warning that several processes say alike is said
once, and the end lists the processes that said it); --replay of the run's
captures names them as the run did."""
import re

import pytest

from conftest import BUILD, SOURCE, log_messages, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "leak_graphs.py"
STEPS = 4
# Each step's blocks outlive the next one: steps 3..STEPS warn.
WARNED_STEPS = list(range(3, STEPS + 1))

# Two trainers side by side, as a launcher starts them; only the second
# has a RANK in its environment.
LAUNCH_TWO = f'''
env = {{k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}}
kids = [subprocess.Popen([sys.executable, {str(SCRIPT)!r}, "{STEPS}"], env=env),
        subprocess.Popen([sys.executable, {str(SCRIPT)!r}, "{STEPS}"], env=dict(env, RANK="1"))]
print("children", *[k.pid for k in kids], flush=True)
sys.exit(max(k.wait() for k in kids))
'''
PARENT = "import os, subprocess, sys" + LAUNCH_TWO



def console_step_warnings(stderr):
    return [l for l in stderr.splitlines() if l.startswith("[msmemscope] warning: ") and "lasted for" in l]


def logged_step_warnings(out, pid):
    """The step leak warnings in the logs of pid's folders (an exec's images
    each have one), in upstream's words."""
    return [m[len("[warning] "):] for d in process_dirs(out) if d.name.startswith(f"msmemscope_{pid}_")
            for _, m in log_messages(d) if m.startswith("[warning] leaks: [device cpu][step ")]


def test_each_step_warning_names_its_process_and_its_log_keeps_upstreams_words(tmp_path):
    (tmp_path / "parent.py").write_text(PARENT)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--save-capture=true", "--output=out", "--", PY, "parent.py"],
                tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    first, second = (int(x) for x in re.search(r"^children (\d+) (\d+)$", p.stdout, re.M).groups())
    console = console_step_warnings(p.stderr)
    said = {first: f"[pid {first}]", second: f"[pid {second}, rank 1]"}
    for pid in (first, second):
        logged = logged_step_warnings(tmp_path / "out", pid)
        steps = [int(re.match(r"leaks: \[device cpu\]\[step (\d+)\]: ", w)[1]) for w in logged]
        assert steps == WARNED_STEPS, logged
        # the console's line is the log's, with the process named
        named = [l for l in console if l.startswith(f"[msmemscope] warning: {said[pid]} ")]
        assert named == [f"[msmemscope] warning: {said[pid]} {w}" for w in logged], p.stderr
    assert len(console) == 2 * len(WARNED_STEPS), p.stderr

    # --replay of the run's captures names the processes as the run did
    # (it named none: each capture was replayed before the next was seen)
    r = run_cli(["--replay=out/msmemscope_*/capture_*.msmcap", "--analysis=leaks", "--output=replayed"], tmp_path,
                check_rc=0)
    assert "msmemscope: --replay: 3 captures match 'out/msmemscope_*/capture_*.msmcap'" in r.stdout, r.stdout
    replayed = console_step_warnings(r.stderr)
    for pid in (first, second):
        logged = logged_step_warnings(tmp_path / "replayed", pid)
        assert len(logged) == len(WARNED_STEPS), logged
        named = [l for l in replayed if l.startswith(f"[msmemscope] warning: {said[pid]} ")]
        assert named == [f"[msmemscope] warning: {said[pid]} {w}" for w in logged], r.stderr
    assert len(replayed) == 2 * len(WARNED_STEPS), r.stderr


# A one-process training script that runs a helper first (as
# platform.processor() runs `uname -p`, or a script its `git rev-parse`).
WITH_HELPER = f'''
import runpy, subprocess, sys
subprocess.run(["true"], check=True)
sys.argv = [{str(SCRIPT)!r}, "{STEPS}"]
runpy.run_path({str(SCRIPT)!r}, run_name="__main__")
'''


# Users export RANK and LOCAL_RANK in their shells and job scripts: the
# helper inherits the program's rank, which tells no two processes apart.
@pytest.mark.parametrize("ranks", [{}, {"RANK": "0", "LOCAL_RANK": "0"}], ids=["no_rank", "inherited_rank"])
def test_a_helper_the_program_runs_names_nothing(tmp_path, ranks):
    (tmp_path / "train.py").write_text(WITH_HELPER)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", PY, "train.py"], tmp_path,
                env={"PYTHONPATH": "", **ranks}, check_rc=0)
    assert "msmemscope: 2 processes" in p.stdout, p.stdout  # `true` is profiled too
    pid = int(re.search(rf"^msmemscope: pid (\d+) \({PY} train.py\)", p.stdout, re.M)[1])
    logged = logged_step_warnings(tmp_path / "out", pid)
    assert len(logged) == len(WARNED_STEPS), logged
    assert console_step_warnings(p.stderr) == [f"[msmemscope] warning: {w}" for w in logged], p.stderr


FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
WATCH = "aten::adm,aten::mse_loss"  # a start operator that never runs: watch's finish() says so
FAILED = "plugin 'throws_in_event': failed on event {}: throws_in_event: on purpose; continuing without it"



def speaks_first(text):
    """The parent says its line first (its own log has text) and only then
    starts the two trainers: a second process to say a line turns naming
    on."""
    return f'''
import glob, os, subprocess, sys, time
mine = f"out/msmemscope_{{os.getpid()}}_*/msmemscope_logs/*.log"
def said():
    for f in glob.glob(mine):
        try:
            if {text!r} in open(f).read():
                return True
        except FileNotFoundError:
            pass  # (a crashed worker's folder goes)
    return False
while not said():
    time.sleep(0.01)  # (a barrier: polled, not a guess at how long it takes)
''' + LAUNCH_TWO


SPEAKS_FIRST = speaks_first("throws_in_event")


def test_errors_and_finish_warnings_name_their_process(tmp_path):
    (tmp_path / "parent.py").write_text(SPEAKS_FIRST)
    p = run_cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--analysis=throws_in_event", f"--watch={WATCH}",
                 "--output=out", "--", PY, "parent.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=71)
    first, second = (int(x) for x in re.search(r"^children (\d+) (\d+)$", p.stdout, re.M).groups())
    (parent,) = {int(d.name.split("_")[1]) for d in process_dirs(tmp_path / "out")} - {first, second}
    said = {parent: "", first: f"[pid {first}] ", second: f"[pid {second}, rank 1] "}
    errors = [l for l in p.stderr.splitlines() if "throws_in_event" in l]
    assert len(errors) == 3, p.stderr
    warned = {}  # text: the pids that said it
    for pid, who in said.items():
        (d,) = [d for d in process_dirs(tmp_path / "out") if d.name.startswith(f"msmemscope_{pid}_")]
        messages = [m for _, m in log_messages(d)]
        # the log keeps upstream's words; the console names the process (not
        # the parent's line: it was the run's only one then)
        (error,) = [m[len("[error] "):] for m in messages if m.startswith("[error] plugin 'throws_in_event'")]
        assert re.fullmatch(re.escape(FAILED).replace(r"\{\}", r"\d+"), error), error
        assert f"msmemscope: error: {who}{error}" in errors, p.stderr
        watched = [m[len("[warning] "):] for m in messages if m.startswith("[warning] watch: ")]
        if pid == parent:  # it ran no operator
            assert watched == [], watched
            continue
        (warning,) = watched
        assert warning.startswith(f"watch: --watch={WATCH} wrote no checkpoint: its start operator aten::adm never "
                                  "ran in this process ("), warning
        warned.setdefault(warning, []).append(pid)
    # Both trainers say it alike (the same program: the same operators):
    # it is said once, named as the first to say it, and the processes that
    # said it are listed at the end.
    ((warning, pids),) = warned.items()
    assert [l for l in p.stderr.splitlines() if l.endswith(f" {warning}")] in [
        [f"[msmemscope] warning: {said[pid]}{warning}"] for pid in pids], p.stderr
    assert (f'[msmemscope] warning: (the warning above, "{warning}", was said by 2 processes: pids '
            f'{min(pids)}, {max(pids)})') in p.stderr.splitlines(), p.stderr


def test_an_exec_is_no_other_process_the_console_keeps_upstreams_words(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", "/bin/sh", "-c",
                 f"exec {PY} {SCRIPT} {STEPS}"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    (pid,) = {int(d.name.split("_")[1]) for d in process_dirs(tmp_path / "out")}
    logged = logged_step_warnings(tmp_path / "out", pid)
    assert len(logged) == len(WARNED_STEPS), logged
    assert console_step_warnings(p.stderr) == [f"[msmemscope] warning: {w}" for w in logged], p.stderr


# The supervisor's line after a plugin crashed (said by the session, not by
# the worker that crashed) names the process as its worker's lines do; the
# parent's came while it was the run's only one.
def test_the_line_after_a_plugin_crash_names_its_process(tmp_path):
    (tmp_path / "parent.py").write_text(speaks_first("segv_in_event"))
    p = run_cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--analysis=segv_in_event", "--output=out", "--",
                 PY, "parent.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=71)
    first, second = (int(x) for x in re.search(r"^children (\d+) (\d+)$", p.stdout, re.M).groups())
    crashed = "plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the outputs without it"
    lines = [l for l in p.stderr.splitlines() if "segv_in_event" in l]
    assert lines[0] == f"msmemscope: error: {crashed}", p.stderr
    assert sorted(lines[1:]) == sorted([f"msmemscope: error: [pid {first}] {crashed}",
                                        f"msmemscope: error: [pid {second}, rank 1] {crashed}"]), p.stderr
