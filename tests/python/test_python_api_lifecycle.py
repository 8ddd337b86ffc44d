"""The Python API's life cycle with the Python API alone (no CLI), as
programs use it:
* several collection ranges in one process (msmemscope.start() ... stop(),
  then start() again): what the program freed between two ranges is not left
  live in the next range's rows, the pool's figures or the leak report
  (framework/agent/agent.cpp, g_freed_off);
* config(output=...) names a folder relative to the folder current at
  config(), as upstream resolves it, whatever the program's cwd at start()."""
import json
import os
import subprocess
import textwrap

import pytest

from conftest import BUILD, dump_files, parse_attr, process_dirs, read_dump

PY = "/usr/bin/python3"


def run_plain(tmp_path, body, out="memscopeDumpResults", cli=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_HOME"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    cmd = [PY, str(script)]
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--"] + cmd
    # The host inherits stdout and stderr: run() returns once it has written every file.
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    dirs = process_dirs(tmp_path / out)
    assert len(dirs) == 1, dirs
    return p, script, dirs[0]


# Host heap blocks of known size: a bytearray of N bytes is one malloc of N+1
# (over pymalloc's 512-byte limit), at the line that makes it.
HOST_WINDOWS = """\
    import msmemscope
    msmemscope.config(device="cpu", analysis="leaks", call_stack="python")
    keep = {}
    msmemscope.start()
    keep["freed_between"] = bytearray(300001)
    keep["kept"] = bytearray(300002)
    msmemscope.stop()
    del keep["freed_between"]
    msmemscope.start()
    x = bytearray(10)
    msmemscope.stop()
"""


@pytest.mark.parametrize("under_cli", [False, True], ids=["api_alone", "under_cli"])
def test_host_block_freed_between_ranges_is_freed_when_the_next_starts(tmp_path, under_cli):
    if under_cli:  # the API drives the CLI's session (the same agent)
        p, script, procdir = run_plain(tmp_path, HOST_WINDOWS, cli=["--device=cpu", "--analysis=leaks",
                                                                    "--call-stack=python", "--collect-mode=deferred"])
    else:
        p, script, procdir = run_plain(tmp_path, HOST_WINDOWS)
    rows = read_dump(dump_files(procdir)[0])
    marks = [i for i, r in enumerate(rows) if r["Event"] == "SYSTEM" and r["Event Type"] in ("START_TRACE",
                                                                                             "STOP_TRACE")]
    assert [rows[i]["Event Type"] for i in marks] == ["START_TRACE", "STOP_TRACE", "START_TRACE", "STOP_TRACE"]
    made = [r for r in rows if r["Event"] == "MALLOC" and parse_attr(r["Attr"]).get("size") == "300002"]
    assert len(made) == 1, made
    assert made[0]["Call Stack(Python)"] == f"{script}(5): <module>"
    aid = parse_attr(made[0]["Attr"])["allocation_id"]
    frees = [(i, r) for i, r in enumerate(rows)
             if r["Event"] == "FREE" and parse_attr(r["Attr"]).get("allocation_id") == aid]
    assert len(frees) == 1, frees
    i, free = frees[0]
    # freed while collection was off: its FREE comes when the second range starts
    assert marks[2] < i < marks[3], (marks, i)
    assert free["Event Type"] == "HOST"
    assert parse_attr(free["Attr"]) == {"allocation_id": aid, "addr": free["Ptr"], "size": "300002",
                                        "shadow": "true"}
    # the leak report and the figures know only the block still allocated
    assert ("  Host memory still allocated at stop() on device cpu: 1 block(s), 300003 bytes, from 1 allocation "
            "site(s):\n"
            f"    1 block(s), 300003 bytes, allocated at: {script}(6): <module>\n") in p.stdout + p.stderr
    summary = json.loads((procdir / "summary.json").read_text())
    if not under_cli:  # (under the CLI the blocks from before start() are in the pool too: not judged)
        assert summary["pools"]["cpu/HOST"]["final_bytes"] == 300003
    assert summary["leaks"]["bytes"] == 300003 and summary["leaks"]["allocations"] == 1
    assert [(s["kind"], s["site"], s["blocks"], s["bytes"]) for s in summary["top_sites"]] == [
        ("live_at_exit", f"{script}(6): <module>", 1, 300003)]


def test_relative_output_is_the_folder_current_at_config(tmp_path):
    # A program that changes its folder between config() and start() (Hydra's
    # @hydra.main does, into outputs/DATE/TIME): upstream resolves output at
    # config() (ParseOutputPath), so the files go where config() named them.
    (tmp_path / "run").mkdir()
    p, script, procdir = run_plain(tmp_path, """\
        import os, msmemscope
        msmemscope.config(device="cpu", analysis="", output="myout")
        os.chdir("run")
        msmemscope.start()
        x = bytearray(100000)
        msmemscope.stop()
        print("finish:", msmemscope.finish())
        print("cwd:", os.getcwd())
    """, out="myout")
    assert procdir.parent == tmp_path / "myout"
    assert not (tmp_path / "run" / "myout").exists()
    assert f"finish: {procdir}\n" in p.stdout
    assert f"cwd: {tmp_path / 'run'}\n" in p.stdout
    assert f"  output: myout/{procdir.name}\n" in p.stdout + p.stderr


def test_html_shades_the_span_between_stop_and_the_next_start(tmp_path):
    # Nothing is recorded between stop() and start(): the page's charts shade
    # that span (D.off) and say so, rather than draw the level before stop()
    # as if it had held through it.
    p, script, procdir = run_plain(tmp_path, HOST_WINDOWS.replace('analysis="leaks"', 'analysis="leaks", sinks="html"'))
    rows = read_dump(dump_files(procdir)[0])
    marks = [int(r["Timestamp(ns)"]) for r in rows
             if r["Event"] == "SYSTEM" and r["Event Type"] in ("START_TRACE", "STOP_TRACE")]
    assert len(marks) == 4
    page = next(procdir.glob("report_*.html")).read_text()
    data = json.loads(page.split('id="msms-data">')[1].split("</script>")[0])
    base = data["start_ns"]
    assert data["off"] == [[marks[1] - base, marks[2] - base]]
    assert 'shade(D.off, "collection off");' in page
    assert ('"Shaded: collection was off (" +\n      D.off.length + " span(s) between msmemscope.stop() and the next '
            'start()): nothing was recorded there."') in page


# The host killed while the program runs (the OOM killer picks the biggest
# process; a user's kill): nothing else would tell the program that its files
# are missing. waitid(WNOWAIT) waits until the host has ended without
# reaping it: the package reaps it and reads how it ended.
HOST_KILLED = """\
    import os, signal, sys, msmemscope
    msmemscope.config(device="cpu", analysis="leaks")
    msmemscope.start()
    pid = msmemscope._session.active_session().host.pid
    print("host", pid)
    os.kill(pid, signal.SIGKILL)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    keep = bytearray(100000)
    msmemscope.stop()
    if sys.argv[1:] == ["finish"]:
        msmemscope.finish()
    print("program done")
"""


def _run_host_killed(tmp_path, *args):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(HOST_KILLED))
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_HOME"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, str(script), *args], cwd=str(tmp_path), env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"  # the program's own status
    assert p.stdout.endswith("program done\n"), p.stdout
    host = int(p.stdout.split()[1])
    assert (f"msmemscope: error: the host process (pid {host}) was killed by SIGKILL (out of memory? the OOM "
            f"killer sends SIGKILL) before it had written this process's files; the outputs in "
            f"memscopeDumpResults are incomplete\n") in p.stderr, p.stderr
    assert p.stderr.count("the host process (pid") == 1, p.stderr


def test_a_killed_host_is_said_at_exit(tmp_path):
    _run_host_killed(tmp_path)


def test_a_killed_host_is_said_by_finish(tmp_path):
    _run_host_killed(tmp_path, "finish")


def test_a_block_made_between_two_ranges_is_not_said_to_be_from_before_the_start(tmp_path):
    # Made after the first start(), while collection was off: not judged (a
    # shadow block, no stack), and the report says when it may have been made.
    p, script, procdir = run_plain(tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", analysis="leaks", call_stack="python")
        keep = {}
        msmemscope.start()
        keep["kept"] = bytearray(300002)
        msmemscope.stop()
        keep["made_between"] = bytearray(300004)
        msmemscope.start()
        x = bytearray(10)
        msmemscope.stop()
    """)
    out = p.stdout + p.stderr
    assert ("  Host memory still allocated at stop() on device cpu: 1 block(s), 300003 bytes, from 1 allocation "
            "site(s):\n"
            f"    1 block(s), 300003 bytes, allocated at: {script}(5): <module>\n"
            "  Not judged on device cpu: 1 block(s), 300005 bytes allocated before collection started or between a "
            "stop() and the next start() were still allocated at stop() (no stack: allocated while collection was "
            "off)\n") in out, out
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["leaks"]["not_judged_before_start"] == {"blocks": 1, "bytes": 300005}
    assert summary["leaks"]["bytes"] == 300003
