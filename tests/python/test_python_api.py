"""msmemscope Python API (COMPAT §2): config validation, the collection range,
steps, snapshots, RecordFunction, tracer, describer, watcher and the offline
functions' argument checks. Scripts run with plain /usr/bin/python3 (the
package spawns its own host) unless noted."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"
sys.path.insert(0, str(BUILD / "python"))
import msmemscope  # noqa: E402


def run_script(tmp_path, body, args=(), env=None, cli=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    if env:
        e.update(env)
    cmd = [PY, str(script)] + list(args)
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--"] + cmd
    # The host inherits stdout: run() returns once it has written every file.
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def rows_of(out):
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    files = dump_files(dirs[0])
    assert len(files) == 1, files
    return dirs[0], read_dump(files[0])


def kinds(rows):
    return [(r["Event"], r["Event Type"]) for r in rows]


# ---------------------------------------------------------------- config errors
@pytest.mark.parametrize("kw,exc,msg", [
    ({"devcie": "cpu"}, TypeError,
     "msmemscope.config: unknown key 'devcie'; did you mean 'device'? (allowed: device, level, events, call_stack, "
     "analysis, watch, data_format, format, output, output_path, sinks, steps, collect_mode, log_level, "
     "aggregate, suppress, default_suppressions, plugin_time_budget, plugin_path, plugin_options)"),
    ({"level": 0}, TypeError,
     "msmemscope.config: 'level' must be a string or a list of strings, got int (allowed: 0, op, 1, kernel)"),
    # (a list is the comma-separated value: test_python_api_truth.py; its items are strings)
    ({"device": ["cpu", 3]}, TypeError,
     "msmemscope.config: 'device' must be a string or a list of strings; device[1] is int 3 (allowed: npu, "
     "npu:{0..31}, cpu, cuda, cuda:{0..31}; several separated by ',')"),
    ({"device": "gpu"}, ValueError,
     "msmemscope.config: device: invalid value 'gpu' (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})"),
    ({"device": ""}, ValueError,
     "msmemscope.config: device: empty value (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})"),
    ({"level": "2"}, ValueError,
     "msmemscope.config: level: invalid value '2' (allowed: op, kernel, op,kernel; 0 = op, 1 = kernel)"),
    ({"events": "alloc,oops"}, ValueError,
     "msmemscope.config: events: invalid value 'oops' (allowed: alloc, free, launch, access, traceback, none)"),
    ({"call_stack": "c:1001"}, ValueError,
     "msmemscope.config: call_stack: depth '1001' of c out of range (allowed: 0..1000)"),
    ({"call_stack": "java"}, ValueError,
     "msmemscope.config: call_stack: invalid value 'java' (allowed: c, python, each with an optional :depth "
     "0..1000, e.g. c:20,python:10)"),
    ({"format": "xml"}, ValueError, "msmemscope.config: format: invalid value 'xml' (allowed: csv, db)"),
    ({"data_format": "xml"}, ValueError, "msmemscope.config: data_format: invalid value 'xml' (allowed: csv, db)"),
    ({"collect_mode": "later"}, ValueError,
     "msmemscope.config: collect_mode: invalid value 'later' (allowed: immediate, deferred)"),
    ({"log_level": "trace"}, ValueError,
     "msmemscope.config: log_level: invalid value 'trace' (allowed: debug, info, warning, warn, error)"),
    ({"output": ""}, ValueError, "msmemscope.config: output: empty value (allowed: a folder path)"),
    ({"output_path": "x" * 4097}, ValueError, "msmemscope.config: output_path: path longer than 4096 characters"),
    ({"steps": "1,2,3,4,5,6"}, ValueError, "msmemscope.config: steps: at most 5 steps, got 6"),
    ({"aggregate": 1}, TypeError,
     "msmemscope.config: 'aggregate' must be True or False (or a string: 'true', 'false'), got int"),
    ({"aggregate": "maybe"}, ValueError, "msmemscope.config: aggregate: invalid value 'maybe' (allowed: true, false)"),
    ({"watch": "a:out1"}, ValueError,
     "msmemscope.config: watch: invalid value 'a:out1': no ',' before the end op (allowed: [start[:N]],end[,"
     "full-content], e.g. msmemscope.config(watch=\"op1:0,op2\") or msmemscope.config(watch=\",op2\"))"),
])
def test_config_rejects(kw, exc, msg):
    with pytest.raises(exc) as e:
        msmemscope.config(**kw)
    assert str(e.value) == msg


@pytest.mark.parametrize("value", ["on", "yes", "1"])
def test_config_aggregate_takes_the_command_lines_spellings(tmp_path, value):
    # The validator took "yes", "on" and "1" (as the command line does), and
    # then only "true" became --aggregate: the run wrote every row.
    run_script(tmp_path, f"""
        import msmemscope
        msmemscope.config(device="cpu", aggregate={value!r}, output="out")
        msmemscope.start()
        x = bytearray(1 << 20)
        msmemscope.stop()
    """)
    (d,) = process_dirs(tmp_path / "out")
    assert json.loads((d / "config.json").read_text())["sinks"] == []
    assert dump_files(d) == []


RELRO_PAGES = Path(__file__).resolve().parents[1] / "programs" / "python" / "relro_pages.py"


@pytest.mark.parametrize("how", ["api", "cli"])
def test_heap_hooks_leave_the_relro_pages_read_only(tmp_path, how):
    # The package writes the heap hooks in the GOT slots of every loaded
    # object; Debian's libraries (-z now) have them in their RELRO pages,
    # which the loader made read-only. Each page gets its protection back
    # after the write: libexpat, libsqlite3, libcrypto... stayed writable
    # for the rest of the process (api). Under the CLI, as a guard.
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    cmd = [PY, str(RELRO_PAGES)] + (["api"] if how == "api" else [])
    if how == "cli":
        cmd = [str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--output=out", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    said = [line for line in p.stdout.splitlines() if line.split(":")[0] in ("before", "collecting", "after")]
    assert said == ["before: read-only", "collecting: read-only", "after: read-only"], p.stdout
    assert len(process_dirs(tmp_path / "out")) == 1


def test_config_unknown_analyzer_and_sink_name_the_plugins():
    with pytest.raises(ValueError) as e:
        msmemscope.config(analysis="leeks")
    assert str(e.value).startswith("msmemscope.config: analysis: unknown analyzer 'leeks'")
    assert "(available: " in str(e.value)
    with pytest.raises(ValueError) as e:
        msmemscope.config(sinks="nosuch")
    assert str(e.value).startswith("msmemscope.config: sinks: unknown sink 'nosuch' (available: ")
    assert "csv" in str(e.value)


def test_config_is_keyword_only():
    with pytest.raises(TypeError):
        msmemscope.config("cpu")


def test_config_accepts_plugin_names_from_list_plugins(tmp_path):
    # the built-in analyzers and sinks are listed by name ...
    analyzers = msmemscope.list_analyzers()
    assert {"leaks", "decompose", "inefficient", "oom", "watch"} <= set(analyzers), analyzers
    sinks = {p["name"] for p in msmemscope._offline._plugins() if p["kind"] == "sink"}
    assert {"csv", "db", "trace", "html"} <= sinks, sinks
    # ... and names taken from those lists select exactly those plugins for the run
    run_script(tmp_path, """
        import msmemscope
        names = msmemscope.list_analyzers()
        msmemscope.config(device="cpu", analysis=",".join(n for n in names if n in ("decompose", "leaks")),
                          sinks="trace,html", output="out")
        msmemscope.start()
        keep = bytearray(1 << 20)
        msmemscope.stop()
    """)
    [d] = process_dirs(tmp_path / "out")
    cfg = json.loads((d / "config.json").read_text())
    assert sorted(cfg["analysis"]) == ["decompose", "leaks"], cfg["analysis"]  # in list_analyzers() order
    assert set(cfg["sinks"]) == {"csv", "trace", "html"}, cfg["sinks"]
    # each selected sink wrote its file, and nothing else did
    assert len(dump_files(d)) == 1 and len(list(d.glob("trace_*.json"))) == 1 and len(list(d.glob("report_*.html"))) == 1
    assert not list(d.rglob("*.db"))
    # each selected analyzer ran (their findings are in the HTML report), and only those
    html = next(d.glob("report_*.html")).read_text()
    assert re.search(r'"owners":\{"total":[1-9]', html) and re.search(r'"leaks":\{"total":[1-9]', html)
    assert '"inefficient":{"total"' not in html and '"oom":{"total"' not in html
    assert not any("inefficient_type" in r["attr"] for r in read_dump(dump_files(d)[0]))


def test_help_of_config_lists_every_key():
    doc = msmemscope.config.__doc__
    for key in ("device", "level", "events", "call_stack", "analysis", "watch", "data_format", "output"):
        assert key in doc


def test_output_format_watch_take_effect_only_once(tmp_path):
    run_script(tmp_path, """
        import warnings, msmemscope
        msmemscope.config(device="cpu", analysis="", output="first")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            # (device and analysis named again: each config() call starts from the defaults)
            msmemscope.config(device="cpu", analysis="", output="second")
        assert str(w[0].message) == ("msmemscope.config: output='second' is ignored: output, data_format and watch "
                                     "are taken only from the first config() call, as upstream's config() does "
                                     "(output keeps 'first'); give it in the first config() call"), w[0].message
        assert len(w) == 1, [str(x.message) for x in w]
        msmemscope.start(); msmemscope.stop()
        try:
            msmemscope.config(events="alloc")
        except RuntimeError as e:
            print(e)
    """)
    assert (tmp_path / "first").is_dir() and not (tmp_path / "second").exists()


def test_config_change_after_start_is_refused(tmp_path):
    # (events, call_stack and level may change between ranges:
    # test_python_api_ranges.py)
    p = run_script(tmp_path, """
        import msmemscope
        msmemscope.config(device="cpu", analysis="", output="out")
        msmemscope.start(); msmemscope.stop()
        try:
            msmemscope.config(log_level="error")
        except RuntimeError as e:
            print("ERR", e)
    """)
    assert ("ERR msmemscope.config: 'log_level' cannot change once the collection session has started: "
            f"msmemscope.start() at {tmp_path / 'script.py'}:4 opened it (config() must come before the first "
            "start(), step(), take_snapshot() or tracer.start(); events, call_stack and level may change between "
            "ranges)") in p.stdout


# ---------------------------------------------------------------- the host process (plain python)
def test_start_returns_once_the_host_serves_this_process(tmp_path):
    # start() waits until the host's pipeline runs for this process: its
    # output folder is there when start() returns.
    p = run_script(tmp_path, """
        import glob, msmemscope
        msmemscope.config(device="cpu", events="alloc", analysis="", output="out")
        msmemscope.start()
        print("FOLDERS", len(glob.glob("out/msmemscope_*_cpu/config.json")))
        msmemscope.stop()
    """)
    assert "FOLDERS 1" in p.stdout


def test_start_reports_a_host_that_ended(tmp_path):
    host = tmp_path / "fake_host.sh"
    host.write_text("#!/bin/sh\necho 'fake host: cannot start' >&2\nexit 3\n")
    host.chmod(0o755)
    p = run_script(tmp_path, f"""
        import os, msmemscope
        from msmemscope import _session
        _session.CLI = {str(host)!r}
        msmemscope.config(device="cpu", events="alloc", analysis="", output="out")
        try:
            msmemscope.start()
        except RuntimeError as e:
            print("ERR", e)
        print("LEFT", sorted(os.listdir("out")))
    """)
    assert ("ERR msmemscope: the host process ended (exit code 3) before it served this process; "
            "its messages are above") in p.stdout
    assert "fake host: cannot start" in p.stderr
    assert "LEFT []" in p.stdout


def test_start_reports_why_the_host_cannot_serve(tmp_path):
    # The process folder's name and its 99 numbered variants taken by files
    # for the next seconds: the host cannot create a fresh folder and says
    # so; start() raises with its reason.
    p = run_script(tmp_path, """
        import os, time, msmemscope
        os.makedirs("out")
        now = time.time()
        for s in range(-1, 30):
            ts = time.strftime("%Y%m%d%H%M%S", time.localtime(now + s))
            for n in ["", *(f"_{k}" for k in range(2, 101))]:
                open(f"out/msmemscope_{os.getpid()}_{ts}_cpu{n}", "w").close()
        msmemscope.config(device="cpu", events="alloc", analysis="", output="out")
        try:
            msmemscope.start()
        except RuntimeError as e:
            print("ERR", e)
    """)
    line = [l for l in p.stdout.splitlines() if l.startswith("ERR ")]
    assert line, p.stdout + p.stderr
    assert line[0].startswith("ERR msmemscope: the host process cannot serve this process: "), line[0]
    assert line[0].endswith("_cpu: cannot create the output folder: it and 99 numbered variants (_2, _3, ...) "
                            "exist"), line[0]


# ---------------------------------------------------------------- ranges, steps, snapshots
def test_ranges_steps_and_snapshot_rows(tmp_path):
    run_script(tmp_path, """
        import msmemscope
        msmemscope.config(device="cpu", events="alloc,free", analysis="", output="out")
        keep = []
        keep.append(bytearray(1 << 16))          # before start: not recorded
        assert msmemscope.step() == 0            # outside a range: no mark (as upstream), no number used
        msmemscope.start()
        keep.append(bytearray(1 << 17))
        assert (msmemscope.step(), msmemscope.step()) == (1, 2)
        msmemscope.stop()
        assert msmemscope.step() == 2            # (a STEP row ahead of START_TRACE, steps summary.json counted)
        keep.append(bytearray(1 << 18))          # between ranges: a shadow MALLOC at the next start
        msmemscope.take_snapshot(device_mask=[0], name="mid")
        msmemscope.start()
        keep.append(bytearray(1 << 19))
        with msmemscope.take_snapshot(name="block"):
            pass
        @msmemscope.take_snapshot(name="deco")
        def f():
            return 1
        f()
        msmemscope.stop()
    """)
    d, rows = rows_of(tmp_path / "out")
    assert json.loads((d / "summary.json").read_text())["steps"] == 2
    system = [(r["Event Type"], r["Name"]) for r in rows if r["Event"] in ("SYSTEM", "SNAPSHOT")]
    assert system == [("START_TRACE", "N/A"), ("STEP", "1"), ("STEP", "2"), ("STOP_TRACE", "N/A"),
                      ("SNAPSHOT", "mid"), ("START_TRACE", "N/A"), ("SNAPSHOT", "block Start"),
                      ("SNAPSHOT", "block End"), ("SNAPSHOT", "deco Start"), ("SNAPSHOT", "deco End"),
                      ("STOP_TRACE", "N/A")]
    sizes = {int(r["attr"]["size"]) for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "HOST"}
    assert (1 << 17) + 57 in sizes or any(s >= 1 << 17 and s < (1 << 17) + 128 for s in sizes)
    assert not any(s >= 1 << 16 and s < (1 << 16) + 128 for s in sizes)
    # allocated while stopped, still live at the second start (issue #15 item 4)
    second = [int(r["ID"]) for r in rows if r["Event Type"] == "START_TRACE"][1]
    between = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "HOST"
               and (1 << 18) <= int(r["attr"]["size"]) < (1 << 18) + 128]
    assert len(between) == 1 and between[0]["attr"].get("shadow") == "true" and int(between[0]["ID"]) > second
    assert any(s >= 1 << 19 and s < (1 << 19) + 128 for s in sizes)
    snap = [r for r in rows if r["Event"] == "SNAPSHOT"][0]
    assert snap["Device Id"] == "cpu"
    # upstream's keys in its order (csrc/analysis/dump.cpp), then ours
    assert list(snap["attr"])[:10] == ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free",
                                  "device_rate", "reserved_rate", "rss", "peak_rss"]
    assert int(snap["attr"]["total"]) > int(snap["attr"]["free"]) > 0
    assert re.fullmatch(r"\d+\.\d{6}", snap["attr"]["device_rate"]), snap["attr"]
    assert int(snap["attr"]["rss"]) > 0


def test_snapshot_without_start_and_no_preload(tmp_path):
    run_script(tmp_path, """
        import os, msmemscope
        assert "LD_PRELOAD" not in os.environ
        msmemscope.config(device="cpu", analysis="", output="out")
        msmemscope.take_snapshot()
    """)
    _, rows = rows_of(tmp_path / "out")
    assert kinds(rows) == [("SNAPSHOT", "SNAPSHOT")]
    assert rows[0]["Name"] == "Memory Snapshot"


@pytest.mark.parametrize("args,exc,msg", [
    ({"device_mask": "0"}, TypeError, "msmemscope.take_snapshot: 'device_mask' must be None, a device id 0..31, "
                                      "or a list/tuple of device ids; got str '0'"),
    ({"device_mask": [0, True]}, TypeError, "msmemscope.take_snapshot: 'device_mask' must be None, a device id "
                                            "0..31, or a list/tuple of device ids; got bool True"),
    ({"device_mask": 32}, ValueError, "msmemscope.take_snapshot: device id 32 out of range (allowed: None, a "
                                      "device id 0..31, or a list/tuple of device ids)"),
    ({"device_mask": ()}, ValueError, "msmemscope.take_snapshot: 'device_mask' is empty (allowed: None, a device "
                                      "id 0..31, or a list/tuple of device ids)"),
    ({"name": 3}, TypeError, "msmemscope.take_snapshot: 'name' must be a string, got int"),
    ({"name": ""}, ValueError, "msmemscope.take_snapshot: 'name' must be a non-empty single-line string"),
])
def test_take_snapshot_rejects(args, exc, msg):
    with pytest.raises(exc) as e:
        msmemscope.take_snapshot(**args)
    assert str(e.value) == msg


# ---------------------------------------------------------------- trace
def test_traceback_record_function_and_tracer(tmp_path):
    run_script(tmp_path, """
        import msmemscope
        msmemscope.config(device="cpu", events="alloc,free,traceback", analysis="", output="out")
        def leaf():
            return [0] * 10
        def outer():
            return leaf()
        @msmemscope.RecordFunction("deco")
        def g():
            return 1
        msmemscope.start()
        outer()
        with msmemscope.RecordFunction("span"):
            leaf()
        g()
        msmemscope.stop()
        outer()                      # not traced
        msmemscope.tracer.start()
        leaf()
        msmemscope.tracer.stop()
        outer()                      # not traced
    """)
    d, _ = rows_of(tmp_path / "out")
    trace = dump_files(d, kind="python_trace")
    assert len(trace) == 1
    lines = trace[0].read_text().splitlines()
    assert lines[0] == "FuncInfo,StartTime(ns),EndTime(ns),Thread Id,Process Id"
    names = [l.rsplit(",", 4)[0] for l in lines[1:]]
    script = str(tmp_path / "script.py")
    assert names == [f"{script}(4): leaf", f"{script}(6): outer", f"{script}(4): leaf", "span",
                     f"{script}(8): g", "deco", f"{script}(4): leaf"], names
    for l in lines[1:]:
        _, s, e, tid, pid = l.rsplit(",", 4)
        assert int(s) <= int(e)


def test_traceback_covers_every_thread(tmp_path):
    # A thread running before start() and threads started inside the range
    # are traced, each under its own Thread Id; after stop() no thread is.
    # Threads hand over with Events (no sleeps).
    p = run_script(tmp_path, """
        import threading, msmemscope
        msmemscope.config(device="cpu", events="traceback", analysis="", output="out")
        def early_work(): return 1
        def late_work(): return 2
        def after_stop(): return 3
        go, done, again, finished = threading.Event(), threading.Event(), threading.Event(), threading.Event()
        tids = {}
        def early():
            tids["early"] = threading.get_native_id()
            go.wait()
            early_work()
            done.set()
            again.wait()
            after_stop()
            finished.set()
        t0 = threading.Thread(target=early)
        t0.start()
        msmemscope.start()
        go.set()
        done.wait()
        def late(n):
            tids[f"late{n}"] = threading.get_native_id()
            late_work()
        ts = [threading.Thread(target=late, args=(n,)) for n in range(2)]
        for t in ts: t.start()
        for t in ts: t.join()
        msmemscope.stop()
        again.set()
        finished.wait()
        t0.join()
        t3 = threading.Thread(target=after_stop)
        t3.start(); t3.join()
        print("TIDS", tids["early"], tids["late0"], tids["late1"], threading.get_native_id())
    """)
    early_tid, late0, late1, main_tid = [int(x) for x in
                                         [l for l in p.stdout.splitlines() if l.startswith("TIDS ")][0].split()[1:]]
    d, _ = rows_of(tmp_path / "out")
    rows = [l.rsplit(",", 4) for l in dump_files(d, kind="python_trace")[0].read_text().splitlines()[1:]]
    script = str(tmp_path / "script.py")
    by_name = {}
    for name, s, e, tid, pid in rows:
        by_name.setdefault(name, set()).add(int(tid))
    assert by_name.get(f"{script}(4): early_work") == {early_tid}, by_name
    assert by_name.get(f"{script}(5): late_work") == {late0, late1}, by_name
    assert f"{script}(6): after_stop" not in by_name, by_name
    assert len({early_tid, late0, late1, main_tid}) == 4


def test_python_call_stack(tmp_path):
    run_script(tmp_path, """
        import msmemscope
        msmemscope.config(device="cpu", events="alloc,free", call_stack="python:5", analysis="", output="out")
        def make():
            return bytearray(1 << 20)
        msmemscope.start()
        x = make()
        msmemscope.stop()
    """)
    _, rows = rows_of(tmp_path / "out")
    big = [r for r in rows if r["Event"] == "MALLOC" and int(r["attr"]["size"]) >= 1 << 20]
    assert big, "no 1 MiB allocation recorded"
    frames = big[0]["Call Stack(Python)"].splitlines()
    script = str(tmp_path / "script.py")
    assert frames[0] == f"{script}(5): make", frames


def test_python_call_stack_in_a_thread_started_in_the_range(tmp_path):
    run_script(tmp_path, """
        import threading, msmemscope
        msmemscope.config(device="cpu", events="alloc,free", call_stack="python:5", analysis="", output="out")
        keep = []
        def thread_make():
            keep.append(bytearray(3 << 20))
        msmemscope.start()
        t = threading.Thread(target=thread_make)
        t.start(); t.join()
        msmemscope.stop()
    """)
    _, rows = rows_of(tmp_path / "out")
    big = [r for r in rows if r["Event"] == "MALLOC" and int(r["attr"]["size"]) >= 3 << 20]
    assert big, "no 3 MiB allocation recorded"
    frames = big[0]["Call Stack(Python)"].splitlines()
    assert frames[0] == f"{tmp_path / 'script.py'}(6): thread_make", frames


@pytest.mark.parametrize("arg,exc,msg", [
    (3, TypeError, "msmemscope.RecordFunction: 'name' must be a string, got int"),
    ("", ValueError, "msmemscope.RecordFunction: 'name' must be a non-empty single-line string"),
])
def test_record_function_rejects(arg, exc, msg):
    with pytest.raises(exc) as e:
        msmemscope.RecordFunction(arg)
    assert str(e.value) == msg


# ---------------------------------------------------------------- describer, watcher
@pytest.mark.parametrize("call,exc,msg", [
    (lambda: msmemscope.describe.describer(owner=3), TypeError,
     "msmemscope.describe.describer: 'owner' must be a string, got int (allowed: 1..200 characters of letters, "
     "digits, _ . - @ /)"),
    (lambda: msmemscope.describe.describer(owner="a,b"), ValueError,
     "msmemscope.describe.describer: invalid owner 'a,b' (allowed: 1..200 characters of letters, digits, "
     "_ . - @ /)"),
    (lambda: msmemscope.describe.describer(3, 4), TypeError,
     "msmemscope.describe.describer: 'owner' must be a string, got int (allowed: 1..200 characters of letters, "
     "digits, _ . - @ /)"),
    (lambda: msmemscope.describe.describer(), TypeError, None),
])
def test_describer_rejects(call, exc, msg):
    with pytest.raises(exc) as e:
        call()
    if msg:
        assert str(e.value) == msg


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: msmemscope.watcher.watch("x"), TypeError,
     "msmemscope.watcher.watch: expected a torch.Tensor or an address (int), got str"),
    (lambda: msmemscope.watcher.watch(4096), TypeError,
     "msmemscope.watcher.watch: an address needs 'length' (bytes, > 0)"),
    (lambda: msmemscope.watcher.watch(4096, length=0), ValueError,
     "msmemscope.watcher.watch: 'length' must be > 0, got 0"),
    (lambda: msmemscope.watcher.watch(-1, length=8), ValueError,
     "msmemscope.watcher.watch: address -1 out of range (allowed: 1..2**64-1)"),
    (lambda: msmemscope.watcher.watch(4096, length=8, dump_nums=0), ValueError,
     "msmemscope.watcher.watch: 'dump_nums' must be -1 (no limit) or > 0, got 0"),
    (lambda: msmemscope.watcher.remove(12345), KeyError, None),
])
def test_watcher_rejects(call, exc, msg):
    with pytest.raises(exc) as e:
        call()
    if msg:
        assert str(e.value) == msg


def test_watcher_registers_and_removes():
    import ctypes
    buf = ctypes.create_string_buffer(64)
    addr = ctypes.addressof(buf)
    msmemscope.watcher.watch(addr, length=64, name="buf", dump_nums=2)
    assert msmemscope.watcher.watched() == {addr: "buf"}
    msmemscope.watcher.remove(addr)
    assert msmemscope.watcher.watched() == {}


# ---------------------------------------------------------------- offline
def test_list_analyzers_and_config():
    # upstream's format (python/msmemscope/analyzer/__init__.py): its two
    # analyzers first, then our other analyzer plugins
    names = msmemscope.list_analyzers()
    assert names[:2] == ["leaks", "inefficient"] and names[2:] == sorted(names[2:]), names
    assert "decompose" in names
    assert msmemscope.get_analyzer_config("leaks") == {"config_class": "LeaksConfig",
                                                       "parameters": ["input_path", "mstx_info", "start_index"]}
    assert msmemscope.get_analyzer_config("inefficient") == {
        "config_class": "InefficientConfig",
        "parameters": ["input_path", "mem_size", "inefficient_type", "idle_threshold"]}
    for n in names[2:]:
        c = msmemscope.get_analyzer_config(n)
        assert c["config_class"] is None and c["parameters"] == list(c["options"]), c
    with pytest.raises(ValueError) as e:
        msmemscope.get_analyzer_config("nosuch")
    assert str(e.value) == f"Unknown analyzer type: nosuch. Available types are {names}"


@pytest.mark.parametrize("call,exc,msg", [
    (lambda p: msmemscope.analyze("leaks", input_path=str(p / "d.txt")), ValueError,
     "msmemscope.analyze: input_path '{p}/d.txt' is not a .csv or .db dump file"),
    (lambda p: msmemscope.analyze("leaks", input_path=str(p / "missing.csv")), FileNotFoundError,
     "msmemscope.analyze: input_path '{p}/missing.csv' does not exist (allowed: a memscope_dump .csv or .db file, "
     "or a folder with one)"),
    (lambda p: msmemscope.analyze("leaks", input_path=str(p / "d.csv"), nosuch=1), TypeError, None),
    (lambda p: msmemscope.analyze(3, input_path=str(p / "d.csv")), TypeError,
     "msmemscope.analyze: 'name' must be a string, got int"),
])
def test_offline_rejects(tmp_path, call, exc, msg):
    (tmp_path / "d.csv").write_text("ID\n")
    (tmp_path / "d.txt").write_text("x\n")
    with pytest.raises(exc) as e:
        call(tmp_path)
    if msg:
        assert str(e.value) == msg.format(p=tmp_path)


def test_event_checks_its_arguments():
    # _msmemscope.event is a plain CPython function (no allocation per call):
    # positional arguments only, checked as pybind11 checked them.
    from msmemscope import _msmemscope as ext
    with pytest.raises(TypeError) as e:
        ext.event(1, 2, 3)
    assert str(e.value) == "event() takes from 4 to 10 positional arguments (3 given)"
    with pytest.raises(TypeError) as e:
        ext.event(1, 2, 3, 4, 0, 0, 0, 0, "n", "a", "extra")
    assert str(e.value) == "event() takes from 4 to 10 positional arguments (11 given)"
    with pytest.raises(TypeError):
        ext.event("1", 2, 3, 4)
    with pytest.raises(TypeError):
        ext.event(1, 2, 3, 4, 1.5)
    with pytest.raises(OverflowError):
        ext.event(1, 2, 3, 4, -1)
    with pytest.raises(TypeError):
        ext.event(1, 2, 3, 4, 0, 0, 0, 0, b"name")
    with pytest.raises(TypeError):
        ext.event(1, 2, 3, 4, kind=1)
