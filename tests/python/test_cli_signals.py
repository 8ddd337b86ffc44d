"""SIGINT, SIGTERM and SIGHUP to the CLI (issue #28 item 7, #29 item 3,
DESIGN §9): while the program runs they are forwarded to it (a SIGINT sent by
another process too, once); once it has ended, the tool stops within seconds,
kills its pipeline workers (a plugin that never returns included) and says
which outputs are incomplete, exit 70 — never writing on for minutes, never
leaving a worker behind, never signalling the program's old pid.
Barriers are FIFOs: nothing here sleeps.
"""
import os
import re
import select
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BUILD, CLI, communicate_or_explain, log_messages, process_dirs

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"


def env(**extra):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(PYTHONPATH="", PATH="/usr/bin:/bin", **extra)
    return e


def wait_fifo(path, timeout=120):
    """Blocks until a writer has written a byte into the FIFO at path."""
    got = []
    t = threading.Thread(target=lambda: got.append(open(path, "rb").read(1)), daemon=True)
    t.start()
    t.join(timeout)
    assert got, f"nobody wrote into {path}"


def pids_with_arg(arg):
    """Processes whose command line holds arg (the run's unique output path)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if arg.encode() in f.read():
                    out.append(int(d))
        except OSError:
            pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_after_the_program_ended_the_tool_stops_and_says_what_is_incomplete(tmp_path, sig):
    fifo = tmp_path / "in_finish"
    os.mkfifo(fifo)
    out = str(tmp_path / "out")
    p = subprocess.Popen([str(CLI), "--plugin-path", str(FIXTURES), "--device=cpu", "--analysis=",
                          "--sinks=hang_in_finish", "--output", out, "--", "/bin/ls", "/"],
                         cwd=tmp_path, env=env(MSMEMSCOPE_FIXTURE_FIFO=str(fifo)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    wait_fifo(fifo)  # the program has ended; the worker is inside the plugin's finish()
    p.send_signal(sig)
    stdout, stderr = communicate_or_explain(p, 120)
    assert p.returncode == 70, (stdout, stderr)
    name = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGHUP: "SIGHUP"}[sig]
    lines = [l for l in stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert len(lines) == 1, stderr
    assert re.fullmatch(rf"msmemscope: error: {re.escape(out)}/msmemscope_\d+_\d+_cpu: not finished: msmemscope was "
                        rf"interrupted by {name} after the program had ended; the outputs of this process are "
                        r"incomplete", lines[0]), lines[0]
    # The process's log says it too. The worker that wrote the log was
    # killed before it sent its summary, which held the log's name: the
    # host's summary then went to the console only, and the log ended at the
    # worker's last line (an attach that gave up on a stopped program lost
    # its detach warnings from the log so; test_attach.py).
    (procdir,) = process_dirs(out)
    log = [m for _, m in log_messages(procdir)]
    assert log.count("[error] " + lines[0][len("msmemscope: error: "):]) == 1, (lines[0], log)
    # the hung worker went with it, and so did the session folder; no empty
    # plugins' log is left (the worker that would have removed it is gone)
    assert pids_with_arg(out) == []
    assert [str(f) for f in Path(out).rglob("msmemscope_plugins.log")] == []
    assert [f for f in os.listdir(out) if f.startswith(".msmemscope_session_")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_replay_stops_and_says_what_is_incomplete(tmp_path, sig):
    # A signal ended a --replay silently, with the signal's status, a CSV cut
    # mid-row and no summary.json.
    saved = str(tmp_path / "saved")
    subprocess.run([str(CLI), "--device=cpu", "--analysis=", "--save-capture=true", "--output", saved, "--",
                    "/bin/ls", "/"], cwd=tmp_path, env=env(), check=True, capture_output=True, timeout=120)
    (capture,) = [os.path.join(r, f) for r, _, fs in os.walk(saved) for f in fs if f.endswith(".msmcap")]
    fifo = tmp_path / "in_finish"
    os.mkfifo(fifo)
    out = str(tmp_path / "out")
    p = subprocess.Popen([str(CLI), "--plugin-path", str(FIXTURES), "--analysis=", "--sinks=csv,hang_in_finish",
                          "--replay=" + capture, "--output", out], cwd=tmp_path,
                         env=env(MSMEMSCOPE_FIXTURE_FIFO=str(fifo)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wait_fifo(fifo)  # the worker is inside the plugin's finish()
    p.send_signal(sig)
    stdout, stderr = communicate_or_explain(p, 120)
    assert p.returncode == 70, (stdout, stderr)
    name = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}[sig]
    lines = [l for l in stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert len(lines) == 1, stderr
    assert re.fullmatch(rf"msmemscope: error: --replay: {re.escape(out)}/msmemscope_\d+_\d+_cpu: not finished: "
                        rf"msmemscope was interrupted by {name}; the outputs of this process are incomplete",
                        lines[0]), lines[0]
    assert pids_with_arg(out) == []
    assert [str(f) for f in Path(out).rglob("msmemscope_plugins.log")] == []


def test_a_signal_sent_to_the_cli_while_the_program_runs_reaches_the_program_once(tmp_path):
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import signal, sys\n"
        "hits = []\n"
        "def on_int(sig, frame):\n"
        "    hits.append(sig)\n"
        "    if len(hits) == 1:\n"
        "        print('interrupted', flush=True)\n"
        "        sys.exit(3)\n"
        "signal.signal(signal.SIGINT, on_int)\n"
        # closed here, not by the file object's finalizer: its flush runs
        # the signal handlers right after the write that wakes the test,
        # and an exception raised there (our sys.exit) is discarded by
        # CPython when the close is a finalizer's
        f"with open({str(fifo)!r}, 'w') as f:\n"
        "    f.write('r')\n"
        # not signal.pause(): a SIGINT that lands between Python's last
        # check for signals and the pause(2) call is never seen (the program
        # then waits forever; it did under a loaded CI)
        "import time\n"
        "while True:\n"
        "    time.sleep(0.05)\n")
    p = subprocess.Popen([str(CLI), "--device=cpu", "--analysis=", "--output", str(tmp_path / "out"), "--",
                          "/usr/bin/python3", str(prog)], cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    wait_fifo(fifo)
    p.send_signal(signal.SIGINT)  # from a process, as `kill -INT` does
    stdout, stderr = communicate_or_explain(p, 120)
    # the program's own status passes through: it got the signal and exited 3
    assert p.returncode == 3, (stdout, stderr)
    assert stdout.count("interrupted") == 1
    assert re.search(r"^msmemscope: pid \d+ \(/usr/bin/python3 .*prog\.py\) exited with code 3$", stdout, re.M), stdout


def start_time(pid):
    text = open(f"/proc/{pid}/stat").read()
    return text[text.rindex(")") + 2:].split()[19]


def test_a_killed_hosts_worker_goes_with_it_and_the_next_run_removes_its_session(tmp_path):
    fifo = tmp_path / "in_finish"
    os.mkfifo(fifo)
    out = str(tmp_path / "out")
    args = [str(CLI), "--plugin-path", str(FIXTURES), "--device=cpu", "--analysis=", "--output", out]
    p = subprocess.Popen(args + ["--sinks=hang_in_finish", "--", "/bin/ls", "/"], cwd=tmp_path,
                         env=env(MSMEMSCOPE_FIXTURE_FIFO=str(fifo)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_fifo(fifo)
    p.kill()
    p.wait()
    # the worker was in the plugin's finish(): it dies with its host
    for pid in pids_with_arg(out):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        assert select.select([fd], [], [], 60)[0], f"worker {pid} outlived its host"
        os.close(fd)
    (stale,) = [f for f in os.listdir(out) if f.startswith(".msmemscope_session_")]
    # Folders a later run must leave alone: one whose host is alive (this
    # test's own pid and start time), one without an owner file, a link.
    alive = tmp_path / "out" / ".msmemscope_session_alive"
    alive.mkdir(mode=0o700)
    (alive / "owner").write_text(f"msmemscope-session {os.getpid()} {start_time(os.getpid())}\n")
    (tmp_path / "out" / ".msmemscope_session_noowner").mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (target / "owner").write_text("msmemscope-session 1 1\n")
    (tmp_path / "out" / ".msmemscope_session_link").symlink_to(target)
    # a pid reused by another process (another start time) is dead too
    reused = tmp_path / "out" / ".msmemscope_session_reused"
    reused.mkdir(mode=0o700)
    (reused / "owner").write_text(f"msmemscope-session {os.getpid()} 1\n")
    subprocess.run(args + ["--", "/bin/true"], cwd=tmp_path, env=env(), check=True, capture_output=True)
    left = sorted(f for f in os.listdir(out) if f.startswith(".msmemscope_session_"))
    assert left == [".msmemscope_session_alive", ".msmemscope_session_link", ".msmemscope_session_noowner"]
    assert stale not in left
    assert (target / "owner").exists()
