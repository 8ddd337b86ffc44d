"""The Python API never holds the user's interpreter at exit beyond a bounded
time (issue #29 item 3): a plugin that hangs is stopped at its time budget
(config(plugin_time_budget=...), as --plugin-time-budget), and the wait for
the host is at most MSMEMSCOPE_STOP_WAIT_S seconds; after that the host goes
on alone and finishes. Barriers: the host's pid (pidfd), never a sleep.
"""
import os
import re
import select
import subprocess

from conftest import BUILD

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
SCRIPT = """
import sys, msmemscope
msmemscope.config(device="cpu", analysis="", sinks="hang_in_finish", plugin_path=sys.argv[1],
                  plugin_time_budget=sys.argv[2], output=sys.argv[3])
msmemscope.start()
b = bytearray(1000)
msmemscope.stop()
print("script done", flush=True)
"""


def run(tmp_path, budget, **env):
    (tmp_path / "prog.py").write_text(SCRIPT)
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"), **env)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    return subprocess.run(["/usr/bin/python3", "prog.py", str(FIXTURES), budget, "out"], cwd=tmp_path, env=e,
                          capture_output=True, text=True, timeout=300)


def test_a_hung_plugin_is_stopped_at_its_budget_and_the_script_exits(tmp_path):
    p = run(tmp_path, "30,1")
    assert p.returncode == 0 and "script done" in p.stdout, p.stderr
    # (in config()'s words: the script set plugin_time_budget)
    assert ("msmemscope: error: plugin 'hang_in_finish' exceeded its time budget (1 s, 'plugin_time_budget') in "
            "finish; re-running the outputs without it\n") in p.stderr
    assert "still writing" not in p.stderr


def test_the_interpreter_waits_for_the_host_at_most_the_stop_wait(tmp_path):
    p = run(tmp_path, "30,8", MSMEMSCOPE_STOP_WAIT_S="1")
    assert p.returncode == 0 and "script done" in p.stdout, p.stderr
    m = re.search(r"^msmemscope: warning: the host \(pid (\d+)\) is still writing the outputs into out after 1 s "
                  r"\(MSMEMSCOPE_STOP_WAIT_S\); not waiting for it any longer: it finishes on its own, and a plugin "
                  r"that hangs is stopped at its time budget$", p.stderr, re.M)
    assert m, p.stderr
    # the host went on alone: it stops the plugin at its budget and ends
    try:
        fd = os.pidfd_open(int(m.group(1)))
    except ProcessLookupError:
        fd = None  # already gone
    if fd is not None:
        ready, _, _ = select.select([fd], [], [], 120)
        os.close(fd)
        assert ready, "the host did not end"
    dirs = [d for d in os.listdir(tmp_path / "out") if d.startswith("msmemscope_")]
    assert len(dirs) == 1, os.listdir(tmp_path / "out")
