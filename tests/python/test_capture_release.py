"""Long runs keep disk use bounded (issue #18 items 3 and 4).

* --aggregate (CLI, YAML `aggregate: true`, Python config(aggregate=True))
  keeps no per-event rows: the csv/db sinks are off (one warning line each),
  the summary, the analyses and the html/trace sinks work as in a full run,
  the capture is released as the host reads it and the program waits for the
  host past a budget, so disk use is bounded whatever the number of events.
* Without --aggregate and without --save-capture, the read part of the
  capture is punched out of the file too (past MSMEMSCOPE_CAPTURE_KEEP_MIB,
  default 64, kept so that a crashed plugin can be re-run), and the program
  waits for the host once more than MSMEMSCOPE_CAPTURE_UNREAD_MIB (default
  256) beyond that is unread: the capture's disk stays under their sum
  (plus the agent's 2 MiB reserve) however long the run; --save-capture
  keeps everything replayable.

Program: tests/programs/capture/cap_longrun.c (PAIRS malloc/free pairs, then
LEAKS blocks from two sites never freed; with "wait" it prints "ready" and
waits for a line on stdin: the barrier while the test looks at the capture).
"""
import os
import re
import subprocess
import textwrap

from conftest import BUILD, CLI, TEST_BIN, dump_files, process_dirs

PROGRAM = TEST_BIN / "cap_longrun"
FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
OFF_CSV = ("msmemscope: warning: --aggregate: the csv sink is off (it writes a row per event); the summary, the "
           "analyses' reports and the html and trace sinks work in this mode")


def env(**extra):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_CAPTURE_KEEP_MIB", None)
    e.pop("MSMEMSCOPE_CAPTURE_UNREAD_MIB", None)
    e.update(extra)
    return e


def leak_report(stdout):
    """The leaks analyzer's report in the summary (its first line to the
    files list)."""
    lines = stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("leaks:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("  files (in "))
    return lines[start:end]


def events_line(stdout):
    return re.search(r"^  events: \d+, dropped: \d+$", stdout, re.M).group(0)


def run(cli, tmp_path, name, *opts, pairs=20000, leaks=600, rc=0, extra_env=None):
    out = tmp_path / name
    p = cli(["--device=cpu", "--output", str(out), *opts, "--", PROGRAM, str(pairs), str(leaks)], cwd=tmp_path,
            env=extra_env, check_rc=rc)
    return p, out


def test_aggregate_reports_the_same_leaks_with_the_same_sites_as_a_full_run(cli, tmp_path):
    full, full_out = run(cli, tmp_path, "full", "--call-stack=c:16")
    agg, agg_out = run(cli, tmp_path, "agg", "--call-stack=c:16", "--aggregate", "--sinks=html")
    report = leak_report(full.stdout)
    assert report == leak_report(agg.stdout)
    # Two leaking sites, named by their functions (the C stacks were taken).
    assert any("still allocated at exit on device cpu: 600 block(s)" in l for l in report), report
    assert sum(1 for l in report if "allocated at: leak_a" in l) == 1, report
    assert sum(1 for l in report if "allocated at: leak_b" in l) == 1, report
    assert events_line(full.stdout) == events_line(agg.stdout)
    # The csv sink says once that it is off; it wrote nothing.
    assert [l for l in agg.stderr.splitlines() if "--aggregate" in l] == [OFF_CSV]
    (procdir,) = process_dirs(agg_out)
    assert dump_files(procdir) == []
    assert not list(procdir.rglob("*.csv"))
    assert len(list(procdir.glob("report_*.html"))) == 1
    assert '"aggregate": true' in (procdir / "config.json").read_text()
    (full_dir,) = process_dirs(full_out)
    assert len(dump_files(full_dir)) == 1
    assert '"aggregate"' not in (full_dir / "config.json").read_text()


def test_aggregate_from_yaml_and_db_sink_off(cli, tmp_path):
    yaml = tmp_path / "long.yaml"
    yaml.write_text("device: cpu\naggregate: true\ndata_format: db\n")
    p, out = run(cli, tmp_path, "yaml", f"--config={yaml}", pairs=2000, leaks=10)
    assert [l for l in p.stderr.splitlines() if "--aggregate" in l] == [OFF_CSV.replace("the csv sink", "the db sink")]
    (procdir,) = process_dirs(out)
    assert not list(procdir.rglob("*.db"))
    assert "still allocated at exit on device cpu: 10 block(s)" in "\n".join(leak_report(p.stdout))


def test_aggregate_takes_no_value_on_the_command_line(cli, tmp_path):
    p = cli(["--device=cpu", "--aggregate=yes", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert "--aggregate: takes no value" in p.stderr


def _exited(p, timeout):
    try:
        p.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _captures(out):
    """The live captures under out; [] while the session folder is being
    made or removed (glob's scandir raises when a folder goes meanwhile)."""
    try:
        return list(out.glob(".msmemscope_session_*/*.msmcap"))
    except OSError:
        return []


def _disk(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def test_aggregate_disk_stays_bounded_by_the_budget_not_the_events(tmp_path):
    # 3 M events with 16-frame C stacks: a full capture of them is over 20 MiB
    # (measured below from the file size). With an unread budget of 6 MiB
    # (--aggregate's default is 64 MiB) the agent waits for the host past
    # ~6 MiB of unread chunks, so disk use (everything under the output
    # folder, the session folder and its capture included) stays far below.
    out = tmp_path / "out"
    p = subprocess.Popen([str(CLI), "--device=cpu", "--call-stack=c:16", "--aggregate", "--sinks=trace",
                          "--plugin-option=trace.max_events=1000", "--output", str(out), "--",
                          str(PROGRAM), "1500000", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env(MSMEMSCOPE_CAPTURE_UNREAD_MIB="6"))
    peak, size = 0, 0
    while not _exited(p, 0.005):
        peak = max(peak, _disk(out))
        for cap in _captures(out):
            try:
                size = max(size, cap.stat().st_size)
            except OSError:
                pass
    stdout, stderr = p.communicate()
    assert p.returncode == 0, stderr
    events = int(re.search(r"^  events: (\d+), dropped: 0$", stdout, re.M).group(1))
    assert events >= 3000100, stdout
    # The trace sink's note over its budget points to no dump in this mode.
    assert "(--aggregate: no per-event rows were kept)" in stdout, stdout
    assert "every event in the dump" not in stdout
    assert size > 20 << 20, size  # what a capture that keeps everything would hold on disk
    assert peak < 14 << 20, peak


def _capture_while_waiting(tmp_path, name, opts, extra_env, pairs=300000):
    """Runs cap_longrun with "wait" and returns (process, capture path) once
    it printed "ready" (everything recorded, the process still alive)."""
    out = tmp_path / name
    p = subprocess.Popen([str(CLI), "--device=cpu", "--events=none", "--output", str(out), *opts, "--",
                          str(PROGRAM), str(pairs), "50", "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env(**extra_env))
    assert p.stdout.readline() == "ready\n"
    (cap,) = out.glob(".msmemscope_session_*/*.msmcap")
    return p, cap, out


def test_read_chunks_are_punched_out_of_a_running_capture(tmp_path):
    # No --aggregate, no --save-capture: what the host has read leaves the
    # disk (st_blocks) while the file keeps its size; the leak report is whole.
    p, cap, _ = _capture_while_waiting(tmp_path, "punch", ["--call-stack=c:8"], {"MSMEMSCOPE_CAPTURE_KEEP_MIB": "0"})
    size = cap.stat().st_size
    assert size > 4 << 20, size
    # The host reads on while the program waits: wait until it released
    # everything but the chunk the program's thread still holds.
    while cap.stat().st_blocks * 512 > 3 << 20:
        assert not _exited(p, 0.02)
    assert cap.stat().st_size == size
    stdout, stderr = p.communicate("go\n", timeout=600)
    assert p.returncode == 0, stderr
    # 50 leaks from the two sites (the rest: stdio's buffers, alive at exit)
    report = leak_report(stdout)
    assert any("38 block(s)" in l and "allocated at: leak_a" in l for l in report), report
    assert any("12 block(s)" in l and "allocated at: leak_b" in l for l in report), report


def test_a_long_full_run_keeps_its_capture_bounded_on_disk(tmp_path):
    # No --aggregate, no --save-capture, small knobs for a short test: 2 MiB
    # kept for a crash re-run + 4 MiB unread = 96 chunks. 6 M events (a
    # capture of over 24 MiB apparent size) whose program outruns the host:
    # the capture's allocated blocks stay under the budget plus the agent's
    # 2 MiB reserve and a chunk per thread while its apparent size grows.
    out = tmp_path / "out"
    p = subprocess.Popen([str(CLI), "--device=cpu", "--events=none", "--output", str(out), "--",
                          str(PROGRAM), "3000000", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env(MSMEMSCOPE_CAPTURE_KEEP_MIB="2", MSMEMSCOPE_CAPTURE_UNREAD_MIB="4"))
    peak_blocks, size = 0, 0
    while not _exited(p, 0.005):
        for cap in _captures(out):
            try:
                st = cap.stat()
            except OSError:
                continue
            peak_blocks = max(peak_blocks, st.st_blocks * 512)
            size = max(size, st.st_size)
    stdout, stderr = p.communicate()
    assert p.returncode == 0, stderr
    assert re.search(r"^  events: 6000101, dropped: 0$", stdout, re.M), stdout
    assert "still allocated at exit on device cpu: 100 block(s)" in "\n".join(leak_report(stdout))
    assert size > 24 << 20, size
    assert peak_blocks <= (6 << 20) + (2 << 20) + (2 << 16), peak_blocks


def test_save_capture_keeps_everything_replayable(cli, tmp_path):
    # --save-capture wins over the release (even with nothing to keep): the
    # saved capture replays to the same events and the same leaks.
    p, out = run(cli, tmp_path, "saved", "--call-stack=c:8", "--events=none", "--save-capture=true", pairs=100000,
                 leaks=40, extra_env={"MSMEMSCOPE_CAPTURE_KEEP_MIB": "0"})
    (procdir,) = process_dirs(out)
    (cap,) = procdir.glob("*.msmcap")
    st = cap.stat()
    assert st.st_blocks * 512 >= st.st_size - (2 << 20)  # nothing punched (the reserve may be unwritten)
    again = cli(["--replay", str(cap), "--device=cpu", "--events=none", "--output", str(tmp_path / "replayed")],
                cwd=tmp_path, check_rc=0)
    assert leak_report(again.stdout) == leak_report(p.stdout)
    assert events_line(again.stdout) == events_line(p.stdout)


def test_a_crash_after_the_release_cannot_be_rerun_and_says_why(cli, tmp_path):
    p, out = run(cli, tmp_path, "crash", "--aggregate", f"--plugin-path={FIXTURES}", "--sinks=segv_in_finish",
                 pairs=50000, leaks=5, rc=70)
    errors = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error: ")]
    assert len(errors) == 1, p.stderr
    assert errors[0].endswith(
        ": plugin 'segv_in_finish' crashed (SIGSEGV) in finish; the outputs cannot be re-run without it because "
        "the capture's read part was already released (--save-capture=true keeps it); the outputs of this process "
        "are incomplete"), errors[0]
    assert "re-running the outputs without it" not in p.stderr


def test_python_config_aggregate(tmp_path):
    # config(aggregate=True) is the command line's --aggregate for a script
    # that spawns its own host: no per-event rows, the same one warning.
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import ctypes, msmemscope
        try:
            msmemscope.config(aggregate=1)
        except TypeError as e:
            print("ERR", e)
        msmemscope.config(device="cpu", aggregate=True, output="out")
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        msmemscope.start()
        keep = [libc.malloc(4000 + i) for i in range(3)]
        msmemscope.stop()
    """))
    e = env(PYTHONPATH=str(BUILD / "python"))
    e.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.run(["/usr/bin/python3", str(script)], cwd=str(tmp_path), env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert ("ERR msmemscope.config: 'aggregate' must be True or False (or a string: 'true', 'false'), "
            "got int") in p.stdout
    # said in config()'s words: the program set aggregate=True, not --aggregate
    assert [l for l in p.stderr.splitlines() if "aggregate" in l] == [OFF_CSV.replace("--aggregate", "aggregate")]
    (procdir,) = process_dirs(tmp_path / "out")
    assert '"aggregate": true' in (procdir / "config.json").read_text()
    assert not list(procdir.rglob("*.csv"))
