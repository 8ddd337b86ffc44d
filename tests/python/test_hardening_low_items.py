"""#29 item 9: the low items of the second hardening round, each with a test
that fails without its fix (one test per item; the file is shared by them)."""
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BUILD, SOURCE


def _py(body, tmp_path, env=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], cwd=str(tmp_path), env=e,
                          capture_output=True, text=True, timeout=300)


def test_python_plugin_options_accept_a_list_as_yaml_does(tmp_path):
    # YAML's plugins.options takes a list (its items joined by ','); config()
    # raised TypeError on the same value.
    p = _py("""
        import msmemscope, msmemscope._session as s
        msmemscope.config(plugin_options={"memory_viz": {"max_trace_entries": [1000]}})
        print(s._check_plugin_options({"frag": {"pools": ["PTA", "HOST"]}, "frag.steps": (1, 2)}))
        print([o for o in s._cli_options() if o.startswith("--plugin-option")])
        try:
            s._check_plugin_options({"frag": {"pools": [["PTA"]]}})
        except TypeError as e:
            print("nested:", e)
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "{'frag': {'pools': 'PTA,HOST', 'steps': '1,2'}}"
    assert lines[1] == "['--plugin-option=memory_viz.max_trace_entries=1000']"
    assert lines[2].startswith("nested: msmemscope.config: plugin_options: 'frag.pools[0]' must be a str, int or "
                               "bool, got list"), lines[2]



PLUGIN_FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"


def _plugin_args(tmp_path, plugin):
    return ["--plugin-path", str(PLUGIN_FIXTURES), "--device=cpu", "--events=alloc,free", "--output",
            str(tmp_path / "out"), f"--analysis=leaks,{plugin}", "--", "/bin/ls", "/"]


def test_plugin_killed_by_sigkill_names_memory(cli, tmp_path):
    # A worker killed by SIGKILL was "crashed (SIGKILL)": SIGKILL is what the
    # OOM killer sends, and the message says so.
    p = cli(_plugin_args(tmp_path, "kill_in_event"), cwd=tmp_path)
    assert p.returncode == 71, p.stderr
    assert ("msmemscope: error: plugin 'kill_in_event' was killed by SIGKILL (out of memory? the OOM killer sends "
            "SIGKILL) in on_event; re-running the outputs without it") in p.stderr.splitlines(), p.stderr


def test_plugin_oom_killed_in_a_memory_cgroup_is_named_out_of_memory(tmp_path):
    # The real thing: the CLI in a memory cgroup of 128 MiB, a plugin touching
    # memory without end; the kernel's OOM killer kills its worker and the
    # cgroup counts it: "out of memory", for certain.
    import shlex
    import pytest
    import oom_cgroup
    cg, counter, why = oom_cgroup.make_v2()
    if cg is None:
        cg, counter, why1 = oom_cgroup.make_v1()
        if cg is None:
            pytest.skip(f"{why}; {why1}")
    try:
        before = oom_cgroup.oom_kills(counter)
        cmd = " ".join(shlex.quote(str(a)) for a in [BUILD / "bin" / "msmemscope"] + _plugin_args(tmp_path, "hog_in_event"))
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        p = subprocess.run(["sh", "-c", f"echo $$ > {shlex.quote(str(cg / 'cgroup.procs'))} && exec {cmd}"],
                           cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=300)
        assert oom_cgroup.oom_kills(counter) > before, p.stderr
    finally:
        oom_cgroup.remove(cg)
    assert p.returncode == 71, p.stderr
    assert ("msmemscope: error: plugin 'hog_in_event' was killed by SIGKILL: out of memory (its memory cgroup's OOM "
            "killer) in on_event; re-running the outputs without it") in p.stderr.splitlines(), p.stderr


NEWLINE_NAMES = r'''
import torch
src = "def f():\n    return torch.ones(3 << 18)\n"
ns = {"torch": torch}
exec(compile(src, "evil\nfake.py(99): injected", "exec"), ns)
f = ns["f"]
f.__code__ = f.__code__.replace(co_name="g\nfake2.py(7): also")
kept = f()
'''


def test_python_frame_names_with_a_newline_stay_one_frame(cli, tmp_path):
    # A file or function name with a newline added fake frames to every
    # Python stack it was in: it is escaped (\n) within its own frame.
    import csv
    from conftest import dump_files, process_dirs
    (tmp_path / "prog.py").write_text(NEWLINE_NAMES)
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--call-stack=python", "--output=out", "--",
             sys.executable, "prog.py"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    dump = dump_files(process_dirs(tmp_path / "out")[0])[0]
    with open(dump, newline="") as fh:
        stacks = [r["Call Stack(Python)"] for r in csv.DictReader(fh)]
    mine = [s for s in stacks if "evil" in s]
    assert mine, "no row allocated in the evil-named frame"
    for s in mine:
        frames = s.split("\n")
        assert not any(fr.startswith(("fake.py", "fake2.py")) for fr in frames), frames
        assert r"evil\nfake.py(99): injected(2): g\nfake2.py(7): also" in frames, frames


def test_concurrent_runs_into_one_output_are_all_in_its_index(tmp_path):
    # Eight runs of several processes each into one --output at once: the
    # index listed only the last one to finish; it is rebuilt under a lock on
    # the folder, with every run still there.
    import re
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    procs = [subprocess.Popen([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=", "--output=out",
                               "--", "sh", "-c", "/bin/true && /bin/true"], cwd=str(tmp_path), env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [o[1] for o in outs]
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("<h2>run ") == 8, html
    for stdout, _ in outs:
        pids = re.findall(r"^msmemscope: pid (\d+) ", stdout, re.M)
        assert len(pids) >= 2, stdout
        for pid in pids:
            assert f'<tr><td class="n">{pid}</td>' in html, (pid, html)
    total = sum(len(re.findall(r"^msmemscope: pid (\d+) ", o[0], re.M)) for o in outs)
    assert f"<h1>msmemscope: {total} processes</h1>" in html
    # A run whose folders were removed leaves the index at the next run.
    import shutil
    first = re.findall(r"^msmemscope: pid (\d+) ", outs[0][0], re.M)
    for d in (tmp_path / "out").iterdir():
        if d.is_dir() and any(d.name.startswith(f"msmemscope_{pid}_") for pid in first):
            shutil.rmtree(d)
    p = subprocess.run([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=", "--output=out",
                        "--", "sh", "-c", "/bin/true && /bin/true"], cwd=str(tmp_path), env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("<h2>run ") == 8, html
    assert not any(f'<tr><td class="n">{pid}</td>' in html for pid in first)


def test_config_json_marks_dropped_plugins(cli, tmp_path):
    # config.json listed plugins that were dropped as if they ran: it says
    # which were dropped and why (refused at load, crashed, threw).
    import json
    from conftest import process_dirs
    p = cli(["--plugin-path", str(PLUGIN_FIXTURES), "--device=cpu", "--events=alloc,free", "--output=out",
             "--analysis=leaks,segv_in_event,old_minor,no_entry", "--", "/bin/ls", "/"], cwd=tmp_path)
    assert p.returncode == 71, p.stderr
    cfg = json.loads((process_dirs(tmp_path / "out")[0] / "config.json").read_text())
    assert cfg["analysis"] == ["leaks", "segv_in_event", "old_minor"]
    dropped = cfg["dropped"]
    assert sorted(dropped) == ["no_entry", "old_minor", "segv_in_event"], dropped
    assert dropped["segv_in_event"] == "crashed (SIGSEGV) in on_event"
    assert dropped["no_entry"].startswith(f"cannot be loaded: {PLUGIN_FIXTURES}/libmsmemscope_plugin_no_entry.so: ")
    assert dropped["old_minor"].startswith("failed on event "), dropped
    # A run where every plugin ran has no "dropped".
    p = cli(["--device=cpu", "--events=alloc,free", "--output=ok", "--", "/bin/ls", "/"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "dropped" not in json.loads((process_dirs(tmp_path / "ok")[0] / "config.json").read_text())


def test_a_daemon_left_by_the_program_is_named_and_not_waited_for_without_follow_fork(tmp_path):
    # A program that leaves a daemon behind kept the tool waiting silently,
    # even with --follow-fork=false. Now: without following forks the tool
    # does not wait for it at all; with it, one line says what it waits for
    # and how to stop waiting, and Ctrl-C (SIGINT) stops the wait.
    import re
    import signal
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    cli = str(BUILD / "bin" / "msmemscope")
    daemon = "sleep 600 </dev/null >/dev/null 2>&1 & echo $! > daemon.pid"  # not holding our pipes
    try:
        p = subprocess.run([cli, "--device=cpu", "--analysis=", "--follow-fork=false", "--output=a", "--",
                            "sh", "-c", daemon], cwd=str(tmp_path), env=e, capture_output=True, text=True,
                           timeout=120)  # it waited for the daemon's 600 s
        assert p.returncode == 0, p.stderr
        assert "waiting for" not in p.stderr
        d = int((tmp_path / "daemon.pid").read_text())
        os.kill(d, 0)  # still running: the tool ended without it
    finally:
        if (tmp_path / "daemon.pid").exists():
            try:
                os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    (tmp_path / "daemon.pid").unlink()
    proc = subprocess.Popen([cli, "--device=cpu", "--analysis=", "--output=b", "--", "sh", "-c", daemon],
                            cwd=str(tmp_path), env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        for line in proc.stderr:  # the barrier: the tool's own line
            if "waiting for" in line:
                break
        d = int((tmp_path / "daemon.pid").read_text())
        assert re.fullmatch(
            r"msmemscope: the program has ended; waiting for what it left running \(profiled, --follow-fork\): "
            rf"pid {d} \(sleep 600\); end them, or press Ctrl-C \(SIGINT/SIGTERM to pid {proc.pid}\) to stop "
            r"waiting \(they go on unrecorded; their outputs are left incomplete\)\n", line), line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 70, err
        assert "interrupted by SIGINT after the program had ended" in err, err
        # The daemon in the table by its pid and command (not "0 ... not
        # read"), and the shell image it exec'ed from as replaced by exec: its
        # new image did load the agent (the capture that was not finished),
        # it is not one "without the agent".
        rows = [r for r in (out + err).splitlines() if re.match(rf"^  {d} +\d+ +- +", r)]
        assert len(rows) == 2, out + err
        assert re.search(r" replaced by exec +- .*/sh -c sleep 600 ", rows[0]), rows
        assert re.search(r" not finished \(msmemscope was interrupted\) +- +- +sleep 600$", rows[1]), rows
        assert "without the agent" not in out + err and not re.search(r"^  0 ", out + err, re.M), out + err
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError, FileNotFoundError):
            pass


def test_the_wait_for_what_the_program_left_running_is_in_every_process_log(tmp_path):
    """The line that says the tool waits for a daemon the program left was on
    stderr only: a reader of the run's logs (a cluster's, never its console)
    did not learn why the run lasted. Each process's log has it, once, in
    the console's words, before its report; stderr has it once."""
    import signal
    from conftest import log_messages, process_dirs
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    daemon = "sleep 600 </dev/null >/dev/null 2>&1 & echo $! > daemon.pid"  # not holding our pipes
    proc = subprocess.Popen([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=", "--output=out", "--",
                             "sh", "-c", daemon], cwd=str(tmp_path), env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        waiting = ""
        for waiting in proc.stderr:  # the barrier: the tool's own line
            if "waiting for" in waiting:
                break
        assert waiting.startswith("msmemscope: the program has ended; waiting for what it left running "), waiting
        os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)  # "end them"
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "waiting for" not in err, err
    waiting = waiting.rstrip("\n")
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) >= 2, dirs  # sh, and the daemon it left
    report_starts = [l for l in out.splitlines() if l.startswith("msmemscope: pid ")]
    for d in dirs:
        said = [m for _, m in log_messages(d)]
        assert said.count(f"[info] {waiting}") == 1, (d, said)
        first_report_line = next(i for i, m in enumerate(said) if m[len("[info] "):] in report_starts)
        assert said.index(f"[info] {waiting}") < first_report_line, (d, said)


DAEMON = r"""
import os, sys
n = 0
while not os.path.exists("stop"):
    for _ in range(100000):
        bytearray(1000)  # a malloc and a free, recorded
    n += 1
    with open("progress.tmp", "w") as f:
        f.write(str(n))
    os.replace("progress.tmp", "progress")
"""


def _capture_size(pid):
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile: the daemon writes its progress file again and again
            continue
        if ".msmcap" in link:
            return os.stat(f"/proc/{pid}/fd/{fd}").st_size, link
    return None, None


def _wait_for(cond, what, timeout=120):
    import time
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _progress(work):
    try:
        return int((work / "progress").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def test_a_program_left_running_stops_recording_once_nobody_reads(tmp_path):
    # Ctrl-C while the CLI waited for a daemon, or the CLI killed: the daemon
    # went on recording into a capture nobody would read -- a removed file it
    # held open, 279 MB -> 1.37 GB in 16 s. Now it says so once and goes on
    # unrecorded, its capture no longer growing.
    import signal
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e["PYTHONPATH"] = ""
    cli = str(BUILD / "bin" / "msmemscope")
    for how in ("ctrl-c", "kill -9"):
        work = tmp_path / how.replace(" ", "")
        work.mkdir()
        (work / "daemon.py").write_text(DAEMON)
        if how == "ctrl-c":  # the daemon is left by the program
            cmd = ["sh", "-c", "/usr/bin/python3 daemon.py </dev/null >/dev/null 2>daemon.err & echo $! > daemon.pid"]
        else:  # the program itself
            cmd = ["sh", "-c", "echo $$ > daemon.pid; exec /usr/bin/python3 daemon.py 2>daemon.err"]
        # (killed, the CLI leaves its pipes to the program: no pipes then)
        pipe = subprocess.PIPE if how == "ctrl-c" else subprocess.DEVNULL
        proc = subprocess.Popen([cli, "--device=cpu", "--analysis=", "--output=out", "--"] + cmd, cwd=str(work),
                                env=e, stdout=pipe, stderr=pipe, text=True, start_new_session=True)
        d = None
        try:
            if how == "ctrl-c":
                for line in proc.stderr:  # the barrier: the tool's own line
                    if "waiting for" in line:
                        break
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=120)
                assert proc.returncode == 70
            else:
                _wait_for(lambda: _progress(work) >= 2, "the program runs")
                proc.kill()
                proc.wait(timeout=120)
            d = int((work / "daemon.pid").read_text())
            _wait_for(lambda: "collection turned off" in (work / "daemon.err").read_text(), "the agent's line")
            assert (work / "daemon.err").read_text() == (
                "[msmemscope] warning: collection turned off: msmemscope is gone (nobody will read the capture); "
                "the program goes on unrecorded\n"), how
            size, link = _capture_size(d)
            at = _progress(work)
            _wait_for(lambda: _progress(work) >= at + 5, "the daemon goes on")  # ~10 MB of records more
            later, _ = _capture_size(d)
            assert later == size, (how, link, size, later)
        finally:
            if proc.poll() is None:
                proc.kill()
            (work / "stop").write_text("")
            if d:
                _wait_for(lambda: not os.path.exists(f"/proc/{d}") or
                          open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", "the daemon ends")


def test_a_program_in_a_pid_namespace_of_its_own_is_recorded_to_its_end(tmp_path):
    # There the CLI's pid names no process (or another one): the agent must
    # not take the CLI for gone and stop recording after 4 MiB.
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e["PYTHONPATH"] = ""
    (tmp_path / "many.py").write_text("for _ in range(1000000):\n    bytearray(1000)\nprint('done', flush=True)\n")
    if subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid is not permitted here")
    p = subprocess.run([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=", "--sinks=", "--output=out",
                        "--", "unshare", "--pid", "--fork", "/usr/bin/python3", "many.py"], cwd=str(tmp_path), env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert "collection turned off" not in p.stdout + p.stderr
    block = p.stdout.split("msmemscope: pid 1 (/usr/bin/python3 many.py) exited with code 0\n", 1)[1]
    events, dropped = map(int, re.search(r"^  events: (\d+), dropped: (\d+)$", block, re.M).groups())
    assert events >= 2000000 and dropped == 0, p.stdout


# framework/common/capture_format.h, format 4.4: CaptureHeader offsets.
END_KIND_OFFSET, END_CODE_OFFSET, END_SUM_OFFSET, FORMAT_MINOR_OFFSET = 1676, 1680, 1736, 12
FIXED_BEGIN, FIXED_SUM_OFFSET, CLOCK_BEGIN, CLOCK_END, FORK_BEGIN = 24, 1624, 1712, 1728, 1728
START_TICKS_OFFSET = 2000
M64 = (1 << 64) - 1


def _checksum(data, seed):
    """capture_format.h checksum()."""
    import struct
    mul = 0x9E3779B97F4A7C15
    h = [seed ^ 0x243F6A8885A308D3, seed ^ 0x13198A2E03707344, seed ^ 0xA4093822299F31D0, seed ^ 0x082EFA98EC4E6C89]
    n, i = len(data), 0
    while i + 32 <= n:
        for lane in range(4):
            w = struct.unpack_from("<Q", data, i + 8 * lane)[0]
            h[lane] = ((h[lane] ^ w) * mul) & M64
            h[lane] ^= h[lane] >> 31
        i += 32
    tail, k = 0, 0
    while i < n:
        tail ^= ((data[i] << (8 * (k & 7))) ^ (k << 56)) & M64
        i += 1
        k += 1
    r = ((h[0] ^ (h[1] * 3 & M64) ^ (h[2] * 5 & M64) ^ (h[3] * 7 & M64) ^ tail ^ n) * mul) & M64
    return r ^ (r >> 29)


def _fixed_sum(hdr):
    """capture_format.h fixed_sum() of a format 4.x header."""
    import struct
    major, minor = struct.unpack_from("<II", hdr, 8)
    seed = major ^ _checksum(bytes(hdr[CLOCK_BEGIN:CLOCK_END]), major)
    if minor >= 1:
        seed ^= _checksum(bytes(hdr[FORK_BEGIN:FORK_BEGIN + 4]), minor)
    if minor >= 4:
        seed ^= _checksum(bytes(hdr[START_TICKS_OFFSET:START_TICKS_OFFSET + 8]), minor)
    return _checksum(bytes(hdr[FIXED_BEGIN:FIXED_SUM_OFFSET]), seed)


def test_an_edited_end_record_is_reported_corrupt_not_trusted(cli, test_bin, tmp_path):
    # The header's end record had no checksum: an edit of a saved capture
    # turned "exited with code 0" into "killed by signal 11" on --replay.
    import glob
    import struct
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--save-capture=true", "--output=out", "--",
             "/bin/ls", "/"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    [cap] = glob.glob(str(tmp_path / "out" / "*" / "*.msmcap"))
    raw = bytearray(open(cap, "rb").read())
    assert struct.unpack_from("<I", raw, FORMAT_MINOR_OFFSET)[0] == 5  # 4.4: the process's start time; 4.5: callers (kStack kind 4)
    assert struct.unpack_from("<Q", raw, START_TICKS_OFFSET)[0] != 0
    assert struct.unpack_from("<Ii", raw, END_KIND_OFFSET) == (1, 0)  # EndKind::Exit, code 0
    assert struct.unpack_from("<Q", raw, END_SUM_OFFSET)[0] != 0
    assert struct.unpack_from("<Q", raw, FIXED_SUM_OFFSET)[0] == _fixed_sum(raw)  # the port below is right

    def replay(data, name):
        path = tmp_path / name
        path.write_bytes(bytes(data))
        return cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/r_{name}", f"--replay={path}"], cwd=tmp_path)

    r = replay(raw, "ok.msmcap")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^msmemscope: pid \d+ \(/bin/ls /\) exited with code 0$", r.stdout, re.M), r.stdout
    edited = bytearray(raw)
    struct.pack_into("<Ii", edited, END_KIND_OFFSET, 3, 11)  # EndKind::Signal, SIGSEGV
    r = replay(edited, "edited.msmcap")
    assert re.search(r"^msmemscope: pid \d+ \(/bin/ls /\) end record corrupt \(it fails its checksum: how the "
                     r"process ended is not known\)$", r.stdout, re.M), r.stdout
    assert "signal 11" not in r.stdout
    # A capture of format 4.1 (no checksum) is read as before: its end trusted.
    old = bytearray(raw)
    struct.pack_into("<I", old, FORMAT_MINOR_OFFSET, 1)
    struct.pack_into("<Q", old, END_SUM_OFFSET, 0)
    struct.pack_into("<Q", old, FIXED_SUM_OFFSET, _fixed_sum(old))  # the header's sum covers the minor
    r = replay(old, "old.msmcap")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^msmemscope: pid \d+ \(/bin/ls /\) exited with code 0$", r.stdout, re.M), r.stdout


def test_exec_that_drops_the_agent_is_named_not_a_kill(cli, test_bin, tmp_path):
    # `env -i prog` under bash: env's image exec'ed prog with an environment
    # without LD_PRELOAD, so no capture followed, and env's image read as
    # "killed by SIGKILL or the OOM killer". The agent notes such an exec.
    prog = test_bin / "fsize_midrun"
    p = cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", "bash", "-c",
             f"env -i {prog} 10 1000000; env -i /nonexistent/prog; echo after"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.search(rf"^msmemscope: pid \d+ \(env -i {re.escape(str(prog))} 10 1000000\) replaced by exec of "
                     rf"{re.escape(str(prog))} without the agent \(the new program's environment does not preload "
                     r"it, e\.g\. env -i\)$", p.stdout, re.M), p.stdout
    # An exec that failed is taken back: env said so and exited with 127.
    assert re.search(r"^msmemscope: pid \d+ \(env -i /nonexistent/prog\) exited with code 127$", p.stdout, re.M), \
        p.stdout
    assert "OOM killer" not in p.stdout
    # The table of processes: the words without the explanation, and no
    # leaks: the exec took env's memory with it, as any exec does.
    assert re.search(rf"^  \d+ +\d+ +- +replaced by exec of {re.escape(str(prog))} without the agent +- +",
                     p.stdout, re.M), p.stdout
    env_image = p.stdout[p.stdout.index(f"(env -i {prog} 10 1000000) replaced by exec of"):]
    env_image = env_image[:env_image.index("\nmsmemscope: ")]
    assert "still allocated" not in env_image and "leaked" not in env_image, env_image
    summaries = [json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")]
    dropped = [j for j in summaries if "without the agent" in j["ended"]["text"]]
    assert len(dropped) == 1 and dropped[0]["ended"]["how"] == "exec", summaries
    assert dropped[0]["leaks"] == {"bytes": 0, "allocations": 0, "exit_judged": False,
                                   "not_judged_before_start": {"blocks": 0, "bytes": 0}}, dropped[0]  # (went with the exec)
    # A program that exits after its own exec keeps its leaks (env's, here).
    failed = [j for j in summaries if j["ended"]["text"] == "exited with code 127"]
    assert len(failed) == 1 and failed[0]["leaks"]["allocations"] > 0, summaries


@pytest.mark.parametrize("how", ["fexecve", "execveat", "execveat-rel", "python"])
def test_exec_by_descriptor_is_named_as_any_exec(cli, test_bin, tmp_path, how):
    # fexecve/execveat (Python's os.execve(fd, ...)) went unnoted: the image
    # read as the new program's exit, and the block it held at the exec as
    # leaked. Without LD_PRELOAD in the new environment (drop), and with it
    # (keep: the new image recorded as the next capture of the pid).
    def run(env):
        if how == "python":
            program = ["/usr/bin/python3", "-c",
                       "import os; held = bytearray(5000); fd = os.open('/usr/bin/true', os.O_RDONLY); "
                       f"os.execve(fd, ['/usr/bin/true'], {{}} if {env == 'drop'} else os.environ)"]
        else:
            program = [test_bin / "exec_by_fd", how, env, "/usr/bin/true"]
        p = cli(["--device=cpu", "--analysis=leaks", "--output=" + env, "--"] + program, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        return p.stdout, [json.loads(f.read_text()) for f in (tmp_path / env).glob("msmemscope_*/summary.json")]

    out, summaries = run("drop")
    words = ("replaced by exec of /usr/bin/true without the agent (the new program's environment does not preload "
             "it, e.g. env -i)")
    assert re.search(rf"^msmemscope: pid \d+ \(.*\) {re.escape(words)}; then exited with code 0$", out, re.M), out
    assert "still allocated" not in out and "leaked" not in out, out
    (summary,) = summaries
    assert summary["ended"] == {"how": "exec", "code": None, "text": words}, summary
    assert summary["leaks"]["allocations"] == 0 and summary["leaks"]["exit_judged"] is False, summary

    out, summaries = run("keep")
    assert re.search(r"^msmemscope: pid \d+ \(.*\) replaced by exec \(continued in the next capture of this "
                     r"pid\)$", out, re.M), out
    assert re.search(r"^msmemscope: pid \d+ \(/usr/bin/true\) exited with code 0$", out, re.M), out
    assert sorted(s["ended"]["text"] for s in summaries) == [
        "exited with code 0", "replaced by exec (continued in the next capture of this pid)"], summaries


# An exec the agent does not see (a raw syscall(SYS_execve)), into an image
# without the agent (as a static program would be) that execs in turn with it:
# the second image records only after the first image's worker has written
# its summary.json (a barrier), which took the unrecorded end for a SIGKILL
# and what it held then for leaks at exit.
UNSEEN_EXEC = """
import ctypes, glob, os, sys, time
stage = os.environ.get("STAGE", "0")
if stage == "0":
    held = bytearray(3 << 20)  # held at the exec
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(STAGE="1", PRELOAD_AGAIN=os.environ["LD_PRELOAD"])
    argv = [a.encode() for a in [sys.executable] + sys.argv] + [None]
    envp = [f"{k}={v}".encode() for k, v in env.items()] + [None]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(59, sys.executable.encode(), (ctypes.c_char_p * len(argv))(*argv),
                 (ctypes.c_char_p * len(envp))(*envp))  # SYS_execve: not through the PLT
    sys.exit("execve: " + os.strerror(ctypes.get_errno()))
if stage == "1":
    while not glob.glob(f"out/msmemscope_{os.getpid()}_*/summary.json"):
        time.sleep(0.01)  # (a barrier: polled, not a guess at how long it takes)
    os.execve(sys.executable, [sys.executable] + sys.argv,
              dict(os.environ, STAGE="2", LD_PRELOAD=os.environ["PRELOAD_AGAIN"]))
print("second image", os.getpid(), flush=True)
"""


def test_an_exec_the_agent_did_not_see_is_said_once_the_next_image_records(cli, tmp_path):
    # Its summary.json kept 'ended without an end record (killed by SIGKILL
    # or the OOM killer)' and the held block as a leak at exit, while the
    # console said 'replaced by exec (continued in the next capture of this
    # pid)' once the next image had recorded.
    (tmp_path / "unseen.py").write_text(UNSEEN_EXEC)
    p = cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", "/usr/bin/python3", "unseen.py"], cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    pid = int(re.search(r"^second image (\d+)$", p.stdout, re.M)[1])
    continued = "replaced by exec (continued in the next capture of this pid)"
    assert f"msmemscope: pid {pid} (/usr/bin/python3 unseen.py) {continued}" in p.stdout.splitlines(), p.stdout
    assert ("leaks: not judged at its end: it was replaced by an exec that the agent did not record (a later "
            "capture of this pid followed), and what it held then, reported above as still allocated at exit, went "
            "with the exec") in p.stdout.splitlines(), p.stdout
    summaries = {f.parent.name: json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")}
    (first,) = [j for name, j in summaries.items() if not name.endswith("_exec1")]
    assert first["ended"] == {"how": "exec", "code": None, "text": continued}, first
    assert first["leaks"]["allocations"] == 0 and first["leaks"]["exit_judged"] is False, first
    assert not [t for t in first["top_sites"] if t["kind"] == "live_at_exit"], first
    (second,) = [j for name, j in summaries.items() if name.endswith("_exec1")]
    assert second["ended"]["text"] == "exited with code 0", second


# An exec the agent does not see (a raw syscall(SYS_execve)) into a static
# program (attach_static: it writes its pid to READY, then waits for the end
# of stdin), which never loads the agent: no later capture of the pid comes.
UNSEEN_STATIC_EXEC = """
import ctypes, os, sys
held = bytearray(3 << 20)  # held at the exec
prog, ready = sys.argv[1], sys.argv[2]
argv = [prog.encode(), ready.encode(), None]
envp = [f"{k}={v}".encode() for k, v in os.environ.items()] + [None]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(59, prog.encode(), (ctypes.c_char_p * 3)(*argv), (ctypes.c_char_p * len(envp))(*envp))
sys.exit("execve: " + os.strerror(ctypes.get_errno()))
"""


def test_an_unrecorded_exec_that_no_capture_follows_is_said_so_at_the_end(cli, test_bin, tmp_path):
    # The worker took the pid's new command line for an exec and wrote
    # 'replaced by exec (continued in the next capture of this pid)' in
    # summary.json; no later capture came (a static program), and it still
    # said so after the run (the console: "exited with code 0").
    (tmp_path / "unseen.py").write_text(UNSEEN_STATIC_EXEC)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.Popen([str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--analysis=leaks", "--output=out", "--",
                          "/usr/bin/python3", "unseen.py", str(test_bin / "attach_static"), "ready"],
                         cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        ready = tmp_path / "ready"
        while not ready.exists() or not ready.read_text():  # the static image runs
            assert p.poll() is None, p.communicate()
            time.sleep(0.01)
        pid = int(ready.read_text())
        while not list((tmp_path / "out").glob(f"msmemscope_{pid}_*/summary.json")):  # its worker decided
            assert p.poll() is None, p.communicate()
            time.sleep(0.01)  # (a barrier: polled, not a guess at how long it takes)
        out, err = p.communicate("", timeout=300)  # the end of stdin: the static program exits 0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out + err
    words = ("replaced by exec without the agent (an exec the agent did not record, and no later capture of this pid "
             "came: a static or set-user-ID program, or an environment that does not preload the agent)")
    command = f"/usr/bin/python3 unseen.py {test_bin / 'attach_static'} ready"
    assert f"msmemscope: pid {pid} ({command}) {words}; then exited with code 0" in out.splitlines(), out
    assert "continued in the next capture" not in out and "still allocated" not in out, out
    (folder,) = (tmp_path / "out").glob(f"msmemscope_{pid}_*")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["ended"] == {"how": "exec", "code": None, "text": words}, summary
    assert summary["leaks"]["allocations"] == 0 and summary["leaks"]["exit_judged"] is False, summary


PID_REUSE = SOURCE / "tests" / "programs" / "python" / "pid_reuse.py"


def test_a_pid_given_to_another_process_of_the_run_is_not_taken_for_an_exec(cli, tmp_path):
    # A process killed by SIGKILL (no end record) whose pid a later process
    # of the run gets (pid_reuse.py: in a pid namespace, at once): the
    # second capture of the pid was taken for the first one's exec image
    # (its folder "_exec1", the first "replaced by exec (continued in the
    # next capture of this pid)", its held block no leak). The agent records
    # the process's start time; a forked child's capture is a first image.
    p = cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", "/usr/bin/python3", str(PID_REUSE)],
            cwd=tmp_path)
    if p.returncode == 4 and "no pid namespace:" in p.stdout:
        pytest.skip(p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
    pid = int(re.search(r"^reused (\d+)$", p.stdout, re.M)[1])
    command = f"/usr/bin/python3 {PID_REUSE}"
    lines = p.stdout.splitlines()
    assert (f"msmemscope: pid {pid} ({command}) ended without an end record (killed by SIGKILL or the OOM killer)"
            in lines), p.stdout
    assert f"msmemscope: pid {pid} ({command}) exited with code 0 (_exit after fork)" in lines, p.stdout
    assert "replaced by exec" not in p.stdout, p.stdout
    folders = sorted((tmp_path / "out").glob(f"msmemscope_{pid}_*"))
    assert len(folders) == 2 and not [f for f in folders if "_exec" in f.name], folders
    ended = sorted(json.loads((f / "summary.json").read_text())["ended"]["text"] for f in folders)
    assert ended == ["ended without an end record (killed by SIGKILL or the OOM killer)",
                     "exited with code 0 (_exit after fork)"], ended


def test_exec_by_descriptor_that_fails_is_taken_back(cli, test_bin, tmp_path):
    # The exec is noted before it is made; one that fails is taken back: the
    # program goes on, its exit and its leak are its own.
    p = cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", test_bin / "exec_by_fd", "execveat-rel", "drop",
             "/usr/bin/no-such-program"], cwd=tmp_path)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "exec: No such file or directory" in p.stderr, p.stderr
    assert re.search(r"^msmemscope: pid \d+ \(.*exec_by_fd execveat-rel drop /usr/bin/no-such-program\) exited with "
                     r"code 3$", p.stdout, re.M), p.stdout
    assert "Host memory still allocated at exit on device cpu: 1 block(s), 5000 bytes" in p.stdout, p.stdout


def test_exec_of_a_program_that_does_not_load_the_agent_is_named(cli, test_bin, tmp_path):
    # A static program ignores LD_PRELOAD: the exec kept the agent in the
    # environment, yet no capture of the new image follows. The bash image
    # read as "killed by SIGKILL or the OOM killer" in summary.json, and what
    # it held at the exec as leaked.
    prog = test_bin / "attach_static"
    p = cli(["--device=cpu", "--analysis=leaks", "--live", "--output=out", "--", "bash", "-c",
             f"echo start; exec {prog} {tmp_path / 'ready'} < /dev/null"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "start\nstatic done\n" in p.stdout, p.stdout
    words = (f"replaced by exec of {prog} without the agent (its environment preloads the agent, but the new "
             "program did not load it: a static or set-user-ID program)")
    # The program the CLI started: then its new image's wait status.
    assert re.search(rf"^msmemscope: pid \d+ \(/usr/bin/bash -c echo start; exec .*\) {re.escape(words)}; then "
                     r"exited with code 0$", p.stdout, re.M), p.stdout
    assert "still allocated" not in p.stdout and "OOM killer" not in p.stdout, p.stdout
    (summary,) = [json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")]
    assert summary["ended"] == {"how": "exec", "code": None, "text": words}, summary
    assert summary["leaks"] == {"bytes": 0, "allocations": 0, "exit_judged": False,
                                "not_judged_before_start": {"blocks": 0, "bytes": 0}}, summary  # (went with the exec)
    # --live: the worker's last screen said the new program's agent was
    # waited for (known only at the run's end); once the run has ended, the
    # last screen and snapshot say what summary.json says.
    (folder,) = [f.parent for f in (tmp_path / "out").glob("msmemscope_*/summary.json")]
    assert json.loads((folder / "live.json").read_text())["ended"] == words
    live = (folder / "live.txt").read_text()
    assert f"  [finished: {words}]\n" in live and "waiting for the new program's agent" not in live, live


def let_go(fifo):
    """Opens a FIFO the held program reads, if it has opened it yet (no
    reader yet: nothing to let go), so that a failed check leaves nothing held."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


class HeldFifos:
    """The FIFOs a held program reads, by name: release() lets it go on (a
    writer that opens and closes the FIFO); let_go_rest(p), in a finally,
    lets go those not released and kills the program if it still runs, so
    that a failed check leaves nothing held."""

    def __init__(self, **fifos):
        self.fifos, self.released = fifos, set()

    def release(self, name):
        with open(self.fifos[name], "w") as f:
            self.released.add(name)
            f.write("go")

    def let_go_rest(self, p):
        for name, path in self.fifos.items():
            if name not in self.released:
                let_go(path)
        if p.poll() is None:
            p.kill()


def start_late_exec_live(test_bin, tmp_path, *args, live=True):
    """The CLI with --live (unless live=False) on bash, which execs
    late_start (args: its own): the new image's start-up is held, before the
    agent's constructor, until the test opens the FIFO it returns
    (MSMS_TEST_START_GATE). stderr goes to tmp_path/stderr."""
    from conftest import CLI
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = dict(os.environ, MSMS_TEST_START_GATE=str(gate))
    env.pop("LD_PRELOAD", None)
    prog = test_bin / "late_start"
    command = " ".join(["echo start; exec", str(prog)] + [str(a) for a in args])
    with open(tmp_path / "stderr", "w") as err_file:
        p = subprocess.Popen([str(CLI), "--device=cpu", "--analysis=leaks"] + (["--live"] if live else []) +
                             ["--output=out", "--", "bash", "-c", command], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=err_file, text=True)
    return p, gate, prog


def test_exec_whose_next_image_starts_late_is_not_called_static(test_bin, tmp_path):
    # On a loaded machine the new image of an exec made its capture more
    # than the 2 s the worker waits for it: the table said "replaced by exec"
    # while summary.json said the new program did not load the agent (a
    # static or set-user-ID program), as did its --live view's files, and a
    # --live screen drawn before the run ended said so to whoever watched.
    # late_start's start-up is held (before the agent's constructor) until
    # the live view has drawn the first image's last screen: the screen of
    # that in-between time is always drawn, and it must say the new image is
    # waited for.
    p, gate, prog = start_late_exec_live(test_bin, tmp_path)
    gate_open = False
    try:
        lines, line = [], ""
        # The first image's last screen (its worker is done with it): a
        # barrier, not a delay; the new image cannot have started.
        while "[finished" not in line:
            line = p.stdout.readline()
            assert line, "".join(lines) + (tmp_path / "stderr").read_text()
            lines.append(line)
        waiting = f"  [finished: replaced by exec of {prog}, waiting for the new program's agent]\n"
        assert line.endswith(waiting), line
        with open(gate, "w") as g:  # lets the new image start
            gate_open = True
            g.write("go")
        out = "".join(lines) + p.stdout.read()
        p.wait(timeout=120)
    finally:
        if not gate_open:  # a failed check: late_start must not stay held
            let_go(gate)
        if p.poll() is None:
            p.kill()
        p.stdout.close()
    err = (tmp_path / "stderr").read_text()
    assert p.returncode == 0, err
    assert "start\n" in out and "late image done\n" in out, out
    assert re.search(r"^msmemscope: pid \d+ \(/usr/bin/bash -c echo start; exec .*\) replaced by exec \(continued "
                     r"in the next capture of this pid\)$", out, re.M), out
    assert "without the agent" not in out, out
    summaries = {f.parent.name: json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")}
    assert len(summaries) == 2, summaries
    (bash_image,) = [j for name, j in summaries.items() if not name.endswith("_exec1")]
    assert bash_image["ended"] == {"how": "exec", "code": None,
                                   "text": "replaced by exec (continued in the next capture of this pid)"}, bash_image
    assert bash_image["leaks"]["allocations"] == 0 and bash_image["complete"], bash_image
    # --live: the view's last screen and snapshot in that folder say so too.
    (folder,) = [f.parent for f in (tmp_path / "out").glob("msmemscope_*_cpu/summary.json")]
    assert json.loads((folder / "live.json").read_text())["ended"] == bash_image["ended"]["text"]
    live = (folder / "live.txt").read_text()
    assert "[finished: replaced by exec (continued in the next capture of this pid)]" in live, live
    (new_image,) = [j for name, j in summaries.items() if name.endswith("_exec1")]
    assert new_image["ended"]["text"] == "exited with code 0", new_image
    assert not list((tmp_path / "out").glob("msmemscope_*/summary.json.tmp.*"))


def test_live_view_of_an_exec_says_continued_once_the_late_image_records(test_bin, tmp_path):
    # --live, an exec whose new image made its capture after the old image's
    # worker had stopped waiting for it: the old image's view said "waiting
    # for the new program's agent" until the run ended, though the new image
    # had its agent and recorded. It now says, while the new image still
    # runs (held on a FIFO), what the view of an exec continued in time says.
    import queue
    import threading
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    p, gate, prog = start_late_exec_live(test_bin, tmp_path, hold)
    lines, seen = queue.Queue(), []
    threading.Thread(target=lambda: [lines.put(l) for l in p.stdout] + [lines.put("")], daemon=True).start()

    def next_line():
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            pytest.fail("the live view did not change:\n" + "".join(seen[-30:]))
        assert line, "".join(seen) + (tmp_path / "stderr").read_text()
        seen.append(line)
        return line

    def old_image(line):  # the header of the bash image's screen
        return line.startswith("msmemscope live: pid ") and "(/usr/bin/bash -c echo start; exec " in line

    waiting = f"  [finished: replaced by exec of {prog}, waiting for the new program's agent]\n"
    continued = "  [finished: replaced by exec (continued in the next capture of this pid)]\n"
    held = HeldFifos(gate=gate, hold=hold)

    try:
        line = ""
        while not (old_image(line) and "[finished" in line):  # its last screen; the new image is held
            line = next_line()
        assert line.endswith(waiting), line
        held.release("gate")
        while not (old_image(line) and line.endswith(continued)):
            line = next_line()
            assert not (old_image(line) and "[finished" in line and not line.endswith((waiting, continued))), line
        while "late image recording\n" not in seen:  # the new image has recorded, and is held
            next_line()
        (folder,) = (tmp_path / "out").glob("msmemscope_*_cpu")
        assert json.loads((folder / "live.json").read_text())["ended"] == continued[len("  [finished: "):-2]
        assert continued in (folder / "live.txt").read_text()
        assert json.loads((folder / "summary.json").read_text())["ended"] == CONTINUED_ENDED  # (written first)
        held.release("hold")
        while next_line() != "late image done\n":
            pass
        assert p.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()
    finally:
        held.let_go_rest(p)
    # the end of the run says it the same way (summary.json, the last screen)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["ended"]["text"] == "replaced by exec (continued in the next capture of this pid)", summary
    assert continued in (folder / "live.txt").read_text()


CONTINUED_ENDED = {"how": "exec", "code": None, "text": "replaced by exec (continued in the next capture of this pid)"}


def test_summary_of_an_exec_says_continued_once_the_late_image_records(test_bin, tmp_path):
    # An exec whose new image made its capture after the old image's worker
    # had stopped waiting for it: the old image's summary.json said the new
    # program did not load the agent until the run ended, though the new
    # image had its agent and recorded; a user or tool polling summary.json
    # during a long run read it so. It is written again as soon as the next
    # capture is seen: read here while the new image still runs (held on a
    # FIFO), without --live.
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    p, gate, prog = start_late_exec_live(test_bin, tmp_path, hold, live=False)
    summary_file = lambda: next((tmp_path / "out").glob("msmemscope_*_cpu/summary.json"), None)  # the bash image's
    held = HeldFifos(gate=gate, hold=hold)

    def ended():
        try:
            return json.loads(summary_file().read_text())["ended"]
        except (AttributeError, FileNotFoundError, ValueError):
            return None

    try:
        # the old image's worker is done with it (its summary.json is written)
        # while the new image cannot have started: what it knew then
        _wait_for(lambda: ended() is not None, "the bash image's summary.json")
        assert ended()["text"].startswith(f"replaced by exec of {prog} without the agent"), ended()
        held.release("gate")
        assert p.stdout.readline() == "start\n"
        assert p.stdout.readline() == "late image recording\n"  # the new image has recorded, and is held
        _wait_for(lambda: ended() == CONTINUED_ENDED, f"summary.json still says {ended()}")
        assert p.poll() is None  # (still held)
        held.release("hold")
        out = p.stdout.read()
        assert p.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()
    finally:
        held.let_go_rest(p)
        p.stdout.close()
    assert out.startswith("late image done\n"), out
    # the end of the run says it the same way
    assert json.loads(summary_file().read_text())["ended"] == CONTINUED_ENDED
