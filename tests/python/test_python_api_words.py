"""What a run's outputs say to its user names the options that user set.

A user of the Python API alone (a plain `python3 script.py` with
msmemscope.config()/start()/stop(): the host runs with --serve-session) never
typed a command-line option. The host's console messages use config()'s
words (framework/host/api_words.h); so now do the outputs:

1. the html report: where the page names an option ("not analysed
   (--analysis=leaks)", "--analysis=inefficient",
   "--plugin-option=oom.interval_ms=N") it names config()'s key in an API
   session (config.json "python_api": true, the page's D.api), and keeps the
   command line's words under the CLI;
2. the note on a stack the dynamic loader's block got without C stacks asked
   for ("[... a C stack taken without --call-stack=c]") in the dump's rows.

And the Perfetto trace marks each out-of-memory failure (the oom analyzer's
finding) once, with or without --analysis=oom, as the CSV has it.
"""
import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest

from conftest import BUILD, CLI, TEST_BIN, clean_env, dump_files, process_dirs, read_dump, run_cli
from sinks_common import ARTIFACTS, load_trace, only, render
from test_html_oom import cells, oom_rows
from test_html_truth import page_data

PY = "/usr/bin/python3"
MiB = 1 << 20

# N failed allocations of a 1 PiB tensor, after four 1 MiB ones, between
# start() and stop(); argv: output folder, analyses, N.
OOM_SCRIPT = """\
import sys

import torch

import msmemscope

msmemscope.config(device="cpu", events="alloc,free", analysis=sys.argv[2], output=sys.argv[1],
                  sinks="csv,html,trace")
msmemscope.start()
keep = [torch.ones(1 << 18) for _ in range(4)]  # 1 MiB each
failed = 0
for i in range(int(sys.argv[3])):
    try:
        torch.empty(1 << 50, dtype=torch.uint8)
    except RuntimeError:
        failed += 1
print("failed", failed)
msmemscope.stop()
"""


def run_script(tmp_path, body, args, under_cli=None, out="out"):
    """The script with plain python3 (the Python API alone), or under the CLI
    with the options under_cli (collection between start() and stop())."""
    script = tmp_path / "script.py"
    script.write_text(body)
    cmd = [PY, str(script)] + args
    if under_cli is not None:
        cmd = [str(CLI)] + under_cli + ["--collect-mode=deferred", f"--output={tmp_path / out}", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p, only(process_dirs(tmp_path / out))


def oom_run(tmp_path, analysis, n, under_cli):
    pytest.importorskip("torch")
    cli = None
    if under_cli:
        cli = ["--device=cpu", "--events=alloc,free", f"--analysis={analysis}", "--sinks=csv,html,trace"]
    p, d = run_script(tmp_path, OOM_SCRIPT, [str(tmp_path / "out"), analysis, str(n)], cli)
    assert f"failed {n}" in p.stdout.splitlines()
    return p, d


def failing_line(tmp_path):
    """The script's frame that asked for the impossible tensor, as the page's stack cell shows it (escaped)."""
    line = 1 + OOM_SCRIPT.splitlines().index("        torch.empty(1 << 50, dtype=torch.uint8)")
    return f"{tmp_path / 'script.py'}({line}): &lt;module&gt;"


def dom(page, tmp_path, screenshot=None, hash=""):
    return render(page, tmp_path, screenshot, hash=hash, window=(1400, 1800), virtual_time_ms=5000)


def shown_text(html_text):
    """What the page shows: its header and main, without the tags (the
    script and the style are not shown)."""
    body = re.search(r"<header>.*?</main>", html_text, re.S)
    assert body, html_text[:2000]
    return re.sub(r"<[^>]+>", "\n", body.group(0))


def failures_in_trace(d):
    """The trace's out-of-memory marks: [(ns, func, req_size, device, tid)]."""
    doc = load_trace(only(d.glob("trace_*.json")))
    ev = doc["traceEvents"]
    assert not [e for e in ev if e.get("name") == "OOM_TRIGGER"], "the failure is marked once, not by its row too"
    marks = [e for e in ev if e.get("cat") == "oom" and e["name"].startswith("out of memory")]
    base = doc["otherData"]["start_ns"]
    out = []
    for e in marks:
        a = e["args"]
        assert e["ph"] == "i" and e["s"] == "p", e
        assert e["name"] == f"out of memory: {a['func']} of {a['req_size']} B on {a['device_name']}", e
        # the instant's time is the failure's (microseconds, nanosecond digits)
        assert base + round(float(e["ts"]) * 1000) == int(a["timestamp"]), e
        out.append((int(a["timestamp"]), a["func"], int(a["req_size"]), a["device_name"], e["tid"]))
    return out


# ---------------------------------------------------------------- 1. the html report's words
@pytest.fixture(scope="module")
def api_one_failure(tmp_path_factory):
    """One failure, no leaks, inefficient or oom analysis, no stacks: the
    page names each of them."""
    tmp = tmp_path_factory.mktemp("api_one")
    return (tmp,) + oom_run(tmp, "decompose", 1, under_cli=False)


@pytest.fixture(scope="module")
def cli_one_failure(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_one")
    return (tmp,) + oom_run(tmp, "decompose", 1, under_cli=True)


API_TEXTS = [
    '<div class="card" id="card-leaks"><div class="k">leaks</div><div class="v">not analysed (analysis="leaks")'
    '</div></div>',
    '<p class="empty" id="no-leaks">The leaks analysis did not run (analysis="leaks").</p>',
    '<p class="empty" id="no-inefficient">The inefficient analysis did not run (analysis="inefficient").</p>',
    '<p class="note" id="oom-no-details">The oom analysis did not run: analysis="oom" lists the largest and the most '
    'recent blocks live at each failure.</p>',
]
CLI_TEXTS = [
    '<div class="card" id="card-leaks"><div class="k">leaks</div><div class="v">not analysed (--analysis=leaks)'
    '</div></div>',
    '<p class="empty" id="no-leaks">The leaks analysis did not run (--analysis=leaks).</p>',
    '<p class="empty" id="no-inefficient">The inefficient analysis did not run (--analysis=inefficient).</p>',
    '<p class="note" id="oom-no-details">The oom analysis did not run: --analysis=oom lists the largest and the most '
    'recent blocks live at each failure.</p>',
]


def test_the_api_page_names_config_keys(api_one_failure):
    tmp, p, d = api_one_failure
    assert json.loads((d / "config.json").read_text())["python_api"] is True
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    assert data["api"] is True and data["leaks_ran"] is False and data["oom"]["failures"] == 1
    text = dom(page, tmp, ARTIFACTS / "report_api_words_1400.png")
    for t in API_TEXTS:
        assert t in text, (t, shown_text(text))
    [row] = cells(text, "table-oom")
    assert row[2:5] == ["posix_memalign", "1024 TiB (1,125,899,906,842,624 B)", "4.00 MiB"]
    # the failure's stack, taken without call_stack (test_oom_stacks.py): no note naming the option
    assert row[6].startswith(failing_line(tmp)), row[6]
    # nothing the page shows names a command-line option
    shown = shown_text(text)
    assert not re.search(r"--[a-z]", shown), re.findall(r".*--[a-z].*", shown)
    # the flame graph of the blocks live at the end says why they are not leaks
    flame = dom(page, tmp, hash="#msms-flame=leaked")
    assert ('<span class="note" id="flame-note">The leaks analysis did not run (analysis="leaks"): these are the '
            'blocks live at the end of collection (at exit, or at stop() with the Python API), not necessarily '
            'leaks. ') in flame, shown_text(flame)
    assert not re.search(r"--[a-z]", shown_text(flame))


def test_under_the_cli_the_page_names_its_options(cli_one_failure):
    tmp, p, d = cli_one_failure
    assert "python_api" not in json.loads((d / "config.json").read_text())
    page = only(d.glob("report_*.html"))
    assert page_data(page)["api"] is False
    text = dom(page, tmp)
    for t in CLI_TEXTS:
        assert t in text, (t, shown_text(text))
    assert cells(text, "table-oom")[0][6].startswith(failing_line(tmp))
    assert ('<span class="note" id="flame-note">The leaks analysis did not run (--analysis=leaks): these are the '
            'blocks live at the end of collection') in dom(page, tmp, hash="#msms-flame=leaked")


def test_the_api_pages_interval_note(tmp_path):
    """The oom analysis lists the blocks once a second: its option, as config() takes it."""
    p, d = oom_run(tmp_path, "oom:2", 3, under_cli=False)
    text = dom(only(d.glob("report_*.html")), tmp_path)
    assert ('<p class="note" id="oom-interval">The oom analysis lists the blocks at most once per second per device '
            '(plugin_options={"oom.interval_ms": "N"}): not at 2 of these failures.</p>') in text, shown_text(text)
    assert not re.search(r"--[a-z]", shown_text(text))
    # (and the trace marks the three failures once each: the OOM_TRIGGER rows)
    rows = read_dump(only(dump_files(d)))
    trigs = oom_rows(rows, "OOM_TRIGGER")
    assert len(trigs) == 3
    assert failures_in_trace(d) == [(int(t["Timestamp(ns)"]), t["attr"]["func"], int(t["attr"]["req_size"]), "cpu",
                                     int(t["Thread Id"])) for t in trigs]


# ---------------------------------------------------------------- 2. the stacks' note
# Libraries loaded in the range: the dynamic loader's blocks (their link maps)
# get a short C stack, though none was asked for (test_leaks_loader_blocks.py).
DLOPEN = """\
import ctypes

import msmemscope

msmemscope.config(device="cpu", analysis="leaks", output="out")
msmemscope.start()
import sqlite3  # noqa: E402,F401 (_sqlite3's and libsqlite3's link maps)
ctypes.CDLL("libz.so.1")
msmemscope.stop()
"""
LOADER = "[the dynamic loader's block (thread-local storage, dlopen): a C stack taken without {}]"


def noted_rows(d):
    """The rows whose C stack says it was taken without C stacks asked for."""
    rows = read_dump(only(dump_files(d)))
    return [r for r in rows if "a C stack taken without" in r["Call Stack(C)"]]


@pytest.mark.parametrize("under_cli", [False, True])
def test_the_loader_blocks_note_names_the_users_option(tmp_path, under_cli):
    p, d = run_script(tmp_path, DLOPEN, [], ["--device=cpu", "--analysis=leaks"] if under_cli else None)
    rows = noted_rows(d)
    want = LOADER.format('--call-stack=c' if under_cli else 'call_stack="c"')
    assert [r for r in rows if r["Call Stack(C)"].split("\n")[-1] == want], "no block of the dynamic loader"
    for r in rows:
        assert r["Call Stack(C)"].split("\n")[-1] == want, r["Call Stack(C)"]


# ---------------------------------------------------------------- 3. the trace's failures
def test_trace_marks_each_failure_without_the_oom_analysis(api_one_failure, cli_one_failure):
    for tmp, p, d in (api_one_failure, cli_one_failure):
        rows = read_dump(only(dump_files(d)))
        assert not [r for r in rows if r["Event"] == "OOM_DETAIL"]
        [snap] = oom_rows(rows, "OOM_Snapshot")
        assert f"oom: posix_memalign of {1 << 50} bytes failed on device cpu with {4 * MiB} bytes allocated" in p.stderr
        assert failures_in_trace(d) == [(int(snap["Timestamp(ns)"]), "posix_memalign", 1 << 50, "cpu",
                                         int(snap["Thread Id"]))]


@pytest.mark.parametrize("analysis", ["leaks", "oom:3"])
def test_trace_marks_a_c_programs_failure(tmp_path, analysis):
    """analyzers_oom: malloc fails under RLIMIT_AS; with --analysis=oom its
    OOM_TRIGGER row, without it the OOM_Snapshot row and stderr's line."""
    p = run_cli(["--device=cpu", f"--analysis={analysis}", "--sinks=csv,trace", "--output=out", "--",
                 TEST_BIN / "analyzers_oom"], tmp_path, check_rc=3)
    assert "malloc failed as expected" in p.stdout
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    [snap] = oom_rows(rows, "OOM_Snapshot")
    if analysis == "leaks":
        m = re.search(r"oom: (\w+) of (\d+) bytes failed on device cpu", p.stderr)
        func, size = m.group(1), int(m.group(2))
    else:
        [trig] = oom_rows(rows, "OOM_TRIGGER")
        func, size = trig["attr"]["func"], int(trig["attr"]["req_size"])
        assert int(trig["Timestamp(ns)"]) == int(snap["Timestamp(ns)"])
    assert (func, size) == ("malloc", 64 << 30)
    assert failures_in_trace(d) == [(int(snap["Timestamp(ns)"]), func, size, "cpu", int(snap["Thread Id"]))]


# ---------------------------------------------------------------- 4. the trace's budget note
BUDGET = """\
import msmemscope

msmemscope.config(device="cpu", events="alloc,free", analysis="", output="out", sinks="csv,trace",
                  plugin_options={"trace.max_events": "1000"})
msmemscope.start()
for i in range(6000):
    b = bytearray(1000 + i)
    del b
msmemscope.stop()
"""


@pytest.mark.parametrize("under_cli", [False, True])
def test_the_trace_budget_note_names_the_users_option(tmp_path, under_cli):
    """Over its budget the trace says where every event is (its note, in the
    file and on stderr): data_format="db" in an API session."""
    cli = ["--device=cpu", "--events=alloc,free", "--sinks=csv,trace", "--plugin-option=trace.max_events=1000"]
    p, d = run_script(tmp_path, BUDGET, [], cli if under_cli else None)
    note = load_trace(only(d.glob("trace_*.json")))["otherData"]["downsampled_note"]
    dump = only(dump_files(d)).name
    tail = "--data-format=db" if under_cli else 'data_format="db"'
    assert note.endswith(f", every event in the dump ({tail} for indexed queries)"), note
    assert note.startswith("the run is over the trace's budget (options max_events=1000, "), note
    assert f"[msmemscope] warning: trace: {note}\n" in p.stderr, p.stderr
    assert dump.endswith(".csv")


@pytest.mark.parametrize("analysis", ["", "oom:1"])
def test_trace_marks_the_simulated_cuda_drivers_failure(cli, test_bin, tmp_path, analysis):
    """The simulated CUDA driver refuses cuMemAlloc_v2 past its limit
    (test_html_oom.py): the mark is on cuda:0, with or without the analysis."""
    from cuda_helpers import run_cuda
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["oom"], env={"FAKE_CUDA_MEM_LIMIT": "1048576"},
                    extra=[f"--analysis={analysis}", "--sinks=csv,trace"])
    assert "oom rc=2" in p.stdout
    rows = read_dump(only(dump_files(d, "0")))
    [snap] = oom_rows(rows, "OOM_Snapshot")
    if analysis:
        [trig] = oom_rows(rows, "OOM_TRIGGER")
        assert (int(trig["Timestamp(ns)"]), trig["attr"]["func"], trig["attr"]["req_size"]) == (
            int(snap["Timestamp(ns)"]), "cuMemAlloc_v2", "1048576")
    else:
        assert not [r for r in rows if r["Event"] == "OOM_DETAIL"]
        assert "oom: cuMemAlloc_v2 of 1048576 bytes failed on device 0 with 524288 bytes allocated" in p.stderr, p.stderr
    assert failures_in_trace(d) == [(int(snap["Timestamp(ns)"]), "cuMemAlloc_v2", 1048576, "cuda:0",
                                     int(snap["Thread Id"]))]


@pytest.mark.parametrize("analysis", ["leaks", "oom"])
def test_trace_marks_the_simulated_npu_drivers_failure(cli, tmp_path, analysis):
    """The simulated Ascend driver refuses halMemAlloc on device 1."""
    from test_npu_backend import run_train
    p, d = run_train(cli, tmp_path, "--device=npu:1", f"--analysis={analysis}", "--sinks=csv,trace")
    rows = read_dump(only(dump_files(d, "1")))
    [snap] = oom_rows(rows, "OOM_Snapshot")
    assert len([r for r in rows if r["Event Type"] == "OOM_TRIGGER"]) == (analysis == "oom")
    assert failures_in_trace(d) == [(int(snap["Timestamp(ns)"]), "halMemAlloc", 96 << 20, "npu:1",
                                     int(snap["Thread Id"]))]


# ---------------------------------------------------------------- 5. the log file
# The log file (msmemscope_logs/msmemscope_<ts>.log in the process folder) of an
# API session said "--steps" where the console said 'steps', and had neither
# the configuration's warning nor the steps never reached that the console had.
STEPS = """\
import msmemscope

msmemscope.config(device="cpu", events="alloc", steps="9", analysis="leaks", output="out")
msmemscope.start()
for _ in range(2):
    b = bytearray(100000)
    msmemscope.step()
msmemscope.stop()
"""


def the_log(d):
    """The process folder's log: its messages without the time and logger name."""
    text = only((d / "msmemscope_logs").glob("msmemscope_*.log")).read_text()
    return [re.sub(r"^\[[^]]*\] \[msmemscope\] ", "", l) for l in text.splitlines()]


@pytest.mark.parametrize("under_cli", [False, True])
def test_the_log_file_says_what_the_console_says(tmp_path, under_cli):
    cli = ["--device=cpu", "--events=alloc", "--steps=9", "--analysis=leaks"]
    p, d = run_script(tmp_path, STEPS, [], cli if under_cli else None)
    pid = d.name.split("_")[1]
    if under_cli:
        said = ["--events=alloc: also collecting free (for --analysis=leaks); only the events listed are written",
                "leaks: the leak analysis is off when --steps selects steps (only some events are collected)",
                f"pid {pid}: --steps: step 9 was never reached (its last step was 3); nothing was collected for it"]
    else:
        said = ['events="alloc": also collecting free (for analysis="leaks"); only the events listed are written',
                "leaks: the leak analysis is off when 'steps' selects steps (only some events are collected)",
                f"pid {pid}: 'steps': step 9 was never reached (its last step was 3); nothing was collected for it"]
    err = p.stderr.splitlines()
    assert f"msmemscope: warning: {said[0]}" in err and f"[msmemscope] warning: {said[1]}" in err, p.stderr
    assert f"msmemscope: warning: {said[2]}" in err, p.stderr
    log = the_log(d)
    for s in said:
        # once: said when it happened, not again with the end-of-run report
        assert log.count(f"[warning] {s}") == 1, (s, log)
    if not under_cli:
        assert not [l for l in log if re.search(r"(^|[^\w-])--[a-z]", l)], log
    # The end-of-run report (the leak analysis's findings and the files
    # written among it) ends the log, in the words the console printed.
    out = p.stdout.splitlines()
    report = out[out.index(next(l for l in out if l.startswith(f"msmemscope: pid {pid} "))):]
    assert any(l.startswith("  files (in ") for l in report), p.stdout
    assert log[-len(report):] == [f"[info] {r}" for r in report], (report, log)


def test_the_log_file_names_the_time_budget_as_config_does(tmp_path):
    """A plugin over its time budget (the outputs re-run without it): the
    log's note names 'plugin_time_budget', as the console does."""
    fixtures = TEST_BIN.parent / "lib" / "bad_plugins"
    p, d = run_script(tmp_path, f"""\
import msmemscope
msmemscope.config(device="cpu", events="alloc,free", plugin_path={str(fixtures)!r},
                  analysis="leaks,hang_in_event", plugin_time_budget="1", output="out")
msmemscope.start()
a = bytearray(300000)
msmemscope.stop()
""", [])
    note = ("plugin 'hang_in_event' exceeded its time budget (1 s, 'plugin_time_budget') in on_event; the outputs "
            "were re-run without it")
    assert f"  error: {note}" in p.stdout.splitlines(), p.stdout
    assert f"[error] {note}" in the_log(d), the_log(d)


# ---------------------------------------------------------------- 6. the offline Python API
# msmemscope.analyze() and check_inefficient() run the command line's offline
# mode; what they said to their user named its options: "collect stacks with
# --call-stack=c" in analyze()'s report, "--plugin-option: oom.interval_ms:"
# for analyze(..., interval_ms="abc") (after "msmemscope: error:"), "recorded
# with --steps=2" and "without access in --events" in their warnings.
RECORD = """\
import ctypes, sys

import msmemscope

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
kw = dict(steps=sys.argv[2]) if len(sys.argv) > 2 else {}
msmemscope.config(device="cpu", events="alloc,free", analysis="", output=sys.argv[1], **kw)
msmemscope.start()
keep = []
for _ in range(3):
    keep.append(libc.malloc(123457))
    msmemscope.step()
msmemscope.stop()
"""
OFFLINE = """\
import json, os, sys, warnings

import msmemscope

warnings.simplefilter("always")
if os.environ.get("TEST_CONFIG_PLUGIN_PATH"):  # plugins made visible as an online session's are
    msmemscope.config(plugin_path=os.environ["TEST_CONFIG_PLUGIN_PATH"])
if os.environ.get("TEST_CONFIG_PLUGIN_OPTIONS"):  # options set as an online session's are
    msmemscope.config(plugin_options=json.loads(os.environ["TEST_CONFIG_PLUGIN_OPTIONS"]))
name, path = sys.argv[1], sys.argv[2]
kw = dict(a.split("=", 1) for a in sys.argv[3:])
try:
    if name == "check_inefficient":  # (values as JSON: 0, ["early_allocation"])
        msmemscope.check_inefficient(path, **{k: json.loads(v) for k, v in kw.items()})
    else:
        print(msmemscope.analyze(name, input_path=path, **kw))
except Exception as e:
    print(f"raised {type(e).__name__}: {e}")
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The dump of an API run (no stacks, three blocks live at stop()), and
    that of one with steps="2"."""
    tmp = tmp_path_factory.mktemp("recorded")
    (tmp / "record.py").write_text(RECORD)
    (tmp / "offline.py").write_text(OFFLINE)
    dumps = []
    for out, args in (("plain", []), ("steps", ["2"])):
        p = subprocess.run([PY, "record.py", out] + args, cwd=str(tmp), env=clean_env(), capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        dumps.append(only(dump_files(only(process_dirs(tmp / out)))).relative_to(tmp))
    return tmp, dumps[0], dumps[1]


def offline(tmp, *args, **env):
    p = subprocess.run([PY, "offline.py"] + [str(a) for a in args], cwd=str(tmp), env=clean_env(**env),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def test_analyze_reports_in_config_words(recorded):
    tmp, plain, _ = recorded
    p = offline(tmp, "leaks", plain)
    assert ('3 block(s), 370371 bytes, allocated at: an unknown site (collect stacks with call_stack="c")'
            in p.stdout), p.stdout
    assert "--" not in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("name,option,value,allowed", [
    ("oom", "interval_ms", "abc", "an integer in 0..3600000"),
    ("leaks", "default_suppressions", "maybe", "true, false"),
])
def test_analyze_names_its_keyword_when_a_value_is_refused(recorded, name, option, value, allowed):
    tmp, plain, _ = recorded
    p = offline(tmp, name, plain, f"{option}={value}")
    # ValueError, as config() raises for a value it refuses (was RuntimeError)
    assert p.stdout == (f"raised ValueError: msmemscope.analyze: {option}: invalid value '{value}' "
                        f"(allowed: {allowed})\n"), p.stdout


def test_offline_warnings_name_config_keys(recorded):
    tmp, plain, steps = recorded
    p = offline(tmp, "check_inefficient", plain)
    assert (f"UserWarning: msmemscope.check_inefficient: {plain} has no ACCESS rows (it was recorded without access "
            "in 'events'): the inefficient analysis, which judges accesses, had nothing to judge") in p.stderr, p.stderr
    p = offline(tmp, "leaks", steps)
    assert (f"UserWarning: msmemscope.analyze: {steps} was recorded with steps=\"2\" (its START_TRACE row says so): "
            "it holds only those steps' events") in p.stderr, p.stderr
    assert "--" not in p.stdout + p.stderr, p.stdout + p.stderr


# A framework pool's block allocated twice at one address, no FREE between:
# the leaks analyzer warns of it (through the host's warning path).
DOUBLE_MALLOC = """\
ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,Call Stack(Python),Call Stack(C)
1,MALLOC,PTA,N/A,1000,7,7,0,0x1000,"{allocation_id:1,addr:0x1000,size:512,total:4096,used:512}",,
2,MALLOC,PTA,N/A,2000,7,7,0,0x1000,"{allocation_id:2,addr:0x1000,size:512,total:4096,used:1024}",,
"""


def warning_at(tmp, text):
    """A Python warning as it names the user's line (OFFLINE's call of
    analyze())."""
    line = 1 + OFFLINE.splitlines().index("        print(msmemscope.analyze(name, input_path=path, **kw))")
    return f"{tmp / 'offline.py'}:{line}: UserWarning: {text}"


def test_analyzers_own_warnings_reach_the_user_in_config_words(recorded):
    # Before: what an analyzer plugin warned of ("[msmemscope] warning: ..."
    # on the CLI's stderr) was dropped by analyze().
    tmp, _, steps = recorded
    (tmp / "double.csv").write_text(DOUBLE_MALLOC)
    p = offline(tmp, "leaks", "double.csv")
    assert warning_at(tmp, "msmemscope.analyze: leaks: [device 0] double malloc in PTA, ptr: 0x1000") in \
        p.stderr.splitlines(), p.stderr
    p = offline(tmp, "leaks", steps)
    assert warning_at(tmp, "msmemscope.analyze: leaks: the leak analysis is off when 'steps' selects steps (only "
                           "some events are collected)") in p.stderr.splitlines(), p.stderr


# A dump's header and a row of two fields.
SHORT_ROW = DOUBLE_MALLOC.splitlines()[0] + "\n1,MALLOC\n"


def test_an_input_that_is_not_a_dump_is_named_as_the_user_passed_it(recorded):
    # Before: "raised RuntimeError: msmemscope.analyze: --input: notes.csv:1: not a memscope_dump CSV: ..."
    # (as root, after the CLI's "msmemscope: warning: running as root: ..." line).
    tmp = recorded[0]
    (tmp / "notes.csv").write_text("a,b\n1,2\n")
    p = offline(tmp, "leaks", "notes.csv")
    assert p.stdout == ("raised ValueError: msmemscope.analyze: input_path: notes.csv:1: not a memscope_dump CSV: "
                        "missing column(s) ID, Event, Event Type, Name, Timestamp(ns), Process Id, Thread Id, "
                        "Device Id, Ptr, Attr, Call Stack(Python), Call Stack(C) in the header\n"), p.stdout
    # check_inefficient() reads a copy of the file: the user's file is named
    (tmp / "short.csv").write_text(SHORT_ROW)
    p = offline(tmp, "check_inefficient", "short.csv")
    assert p.stdout.splitlines()[-1] == ("raised ValueError: msmemscope.check_inefficient: input_path: short.csv:2: "
                                         "expected 12 fields, found 2"), p.stdout


# A folder config(plugin_path=...) names, or MSMEMSCOPE_PLUGIN_PATH: where an
# online session finds third-party plugins.
API_PLUGINS = BUILD / "tests" / "lib" / "api_plugins"
BAD_PLUGINS = BUILD / "tests" / "lib" / "bad_plugins"


@pytest.mark.parametrize("how", ["config", "env"])
def test_analyze_runs_a_third_party_analyzer_found_as_an_online_session_finds_it(recorded, how):
    # Before, with config(plugin_path=...): list_analyzers() listed
    # attr_views, but analyze() gave the command line no --plugin-path:
    # "raised RuntimeError: msmemscope.analyze: unknown analyzer 'attr_views' ...".
    tmp, plain, _ = recorded
    env = {"TEST_CONFIG_PLUGIN_PATH": str(API_PLUGINS)} if how == "config" else \
        {"MSMEMSCOPE_PLUGIN_PATH": str(API_PLUGINS)}
    p = offline(tmp, "attr_views", plain, **env)
    assert re.search(r"^attr_views: [1-9]\d* event\(s\) checked, 0 with entries changed under add_attr$", p.stdout,
                     re.M), p.stdout + p.stderr


# The options msmemscope.config(plugin_options=...) set, as an online session
# takes them: labelled_count's `label` names its count in its report.
def labelled_count(p):
    return [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("labelled_count: ")]


def test_analyze_takes_the_options_config_set_for_the_analyzer(recorded):
    # Before: analyze() gave the command line config()'s plugin folders but
    # not its plugin options: "labelled_count: mallocs: ...", the option's
    # default, whatever config(plugin_options=...) said.
    tmp = recorded[0]
    (tmp / "double.csv").write_text(DOUBLE_MALLOC)
    env = {"TEST_CONFIG_PLUGIN_PATH": str(API_PLUGINS)}
    p = offline(tmp, "labelled_count", "double.csv", **env)
    assert labelled_count(p) == ["labelled_count: mallocs: 2 MALLOC event(s)"], p.stdout + p.stderr
    # (with a sink's option set for the sessions: not passed on, so not
    # warned of as having no effect on this analysis)
    env["TEST_CONFIG_PLUGIN_OPTIONS"] = json.dumps({"labelled_count": {"label": "blocks"},
                                                    "trace": {"max_events": 1000}})
    p = offline(tmp, "labelled_count", "double.csv", **env)
    assert labelled_count(p) == ["labelled_count: blocks: 2 MALLOC event(s)"], p.stdout + p.stderr
    assert "Warning" not in p.stderr, p.stderr
    # the call's own keyword is the user's latest word
    p = offline(tmp, "labelled_count", "double.csv", "label=mine", **env)
    assert labelled_count(p) == ["labelled_count: mine: 2 MALLOC event(s)"], p.stdout + p.stderr


def test_check_inefficient_takes_the_options_config_set_for_the_analyzer(recorded):
    # Before: check_inefficient(path) passed its arguments' defaults
    # (mem_size=0) and nothing of config(): the block of 4096 bytes was
    # marked although config() asked for blocks of 8192 bytes and more.
    from test_analyzers_cli import upstream_inefficient_csv
    tmp = recorded[0]

    def marked(*args):
        f = upstream_inefficient_csv(tmp / "ineff.csv")
        p = offline(tmp, "check_inefficient", f.name, *args,
                    TEST_CONFIG_PLUGIN_OPTIONS=json.dumps({"inefficient": {"mem_size": 8192}}))
        assert "raised" not in p.stdout, p.stdout
        return {r["ID"]: r["attr"]["inefficient_type"] for r in read_dump(f) if "inefficient_type" in r["attr"]}

    assert marked() == {}
    # an argument the call gives is the user's latest word
    assert marked("mem_size=4096") == {"1": "early_allocation"}


def marked_by_check_inefficient(tmp, make_dump, configured, *args):
    """The marks check_inefficient(FILE, *args) writes back after
    config(plugin_options={"inefficient": configured})."""
    f = make_dump(tmp / "ineff.csv")
    p = offline(tmp, "check_inefficient", f.name, *args,
                TEST_CONFIG_PLUGIN_OPTIONS=json.dumps({"inefficient": configured}))
    assert "raised" not in p.stdout, p.stdout
    return {r["ID"]: r["attr"]["inefficient_type"] for r in read_dump(f) if "inefficient_type" in r["attr"]}


def idle_block_csv(path):
    """A block read by the first and the fourth of four operators: idle for
    two operators between its accesses."""
    from test_analyzers_cli import row, write_csv
    read = "{dtype:torch.float32,shape:[32, 32],size:4096,format:NCHW,type:READ,allocation_id:1}"
    rows = [row(1, "MALLOC", "PTA", "N/A", 100, ptr="0x10",
                attr="{allocation_id:1,addr:0x10,size:4096,total:8192,used:4096}")]
    for op in range(4):
        rows.append(row(len(rows) + 1, "OP_LAUNCH", "ATEN_START", f"aten::op{op}", 100 * len(rows), dev="N/A"))
        if op in (0, 3):
            rows.append(row(len(rows) + 1, "ACCESS", "READ", f"aten::op{op}", 100 * len(rows), ptr="0x10", attr=read))
        rows.append(row(len(rows) + 1, "OP_LAUNCH", "ATEN_END", f"aten::op{op}", 100 * len(rows), dev="N/A"))
    rows.append(row(len(rows) + 1, "FREE", "PTA", "N/A", 100 * len(rows), ptr="0x10",
                    attr="{allocation_id:1,addr:0x10,size:-4096,total:8192,used:0}"))
    return write_csv(path, rows)


# Before: an argument given at its default's value (mem_size=0,
# inefficient_type=[all three], idle_threshold=3000) was taken as not
# given, and config(plugin_options=...)'s value was used instead.
def test_check_inefficient_arguments_given_at_their_default_are_the_users_word(recorded):
    from test_analyzers_cli import upstream_inefficient_csv
    tmp = recorded[0]
    early = {"1": "early_allocation"}
    assert marked_by_check_inefficient(tmp, upstream_inefficient_csv, {"mem_size": 8192}) == {}
    assert marked_by_check_inefficient(tmp, upstream_inefficient_csv, {"mem_size": 8192}, "mem_size=0") == early
    assert marked_by_check_inefficient(tmp, upstream_inefficient_csv, {"inefficient_type": "late_deallocation"}) == {}
    all_kinds = json.dumps(["early_allocation", "late_deallocation", "temporary_idleness"])
    assert marked_by_check_inefficient(tmp, upstream_inefficient_csv, {"inefficient_type": "late_deallocation"},
                                       f"inefficient_type={all_kinds}") == early
    # (None, upstream's way of saying all three, given too)
    assert marked_by_check_inefficient(tmp, upstream_inefficient_csv, {"inefficient_type": "late_deallocation"},
                                       "inefficient_type=null") == early
    idle = {"inefficient_type": "temporary_idleness", "idle_threshold": 1}
    assert marked_by_check_inefficient(tmp, idle_block_csv, idle) == {"1": "temporary_idleness"}
    assert marked_by_check_inefficient(tmp, idle_block_csv, idle, "idle_threshold=3000") == {}


def test_the_upstream_config_class_tells_given_parameters_from_defaults(recorded):
    # msmemscope.analyzer.InefficientConfig, which check_inefficient builds,
    # keeps which parameters its caller gave; its signature still shows
    # upstream's defaults
    import inspect
    from msmemscope.analyzer import InefficientConfig, check_inefficient
    from test_analyzers_cli import upstream_inefficient_csv
    f = upstream_inefficient_csv(recorded[0] / "config_class.csv")
    assert InefficientConfig(str(f)).parameters_given == set()
    given = InefficientConfig(str(f), mem_size=0, idle_threshold=3000).parameters_given
    assert given == {"mem_size", "idle_threshold"}
    assert InefficientConfig(str(f), mem_size=0).mem_size == 0
    for function in (check_inefficient, InefficientConfig.__init__):
        defaults = [f"{name}={p.default!r}" for name, p in inspect.signature(function).parameters.items()
                    if p.default is not p.empty]
        assert defaults == ["mem_size=0", "inefficient_type=None", "idle_threshold=3000"]


# A plugin of the user's own folder that was refused: why (a ValueError, as
# for an analyzer not found), not "unknown analyzer".
@pytest.mark.parametrize("name,reason", [
    ("no_entry", "no entry symbol 'msmemscope_plugin'"),
    ("wrong_abi", "wrong ABI version: got 2.0, supported 1.4"),
])
def test_analyze_says_why_a_plugin_of_the_users_folder_was_refused(recorded, name, reason):
    # Before: "raised ValueError: msmemscope.analyze: unknown analyzer 'no_entry' (available: ...)"
    tmp, plain, _ = recorded
    p = offline(tmp, name, plain, TEST_CONFIG_PLUGIN_PATH=str(BAD_PLUGINS))
    assert p.stdout == (f"raised ValueError: msmemscope.analyze: plugin '{name}' cannot be loaded: "
                        f"{BAD_PLUGINS}/libmsmemscope_plugin_{name}.so: {reason}\n"), p.stdout
    # Not selected, the folder's refusals are not said on every analysis
    # (as the command line says them only with --verbose).
    p = offline(tmp, "leaks", plain, TEST_CONFIG_PLUGIN_PATH=str(BAD_PLUGINS))
    assert "refused" not in p.stderr and "cannot be loaded" not in p.stderr, p.stderr


def test_config_says_why_a_selected_plugin_was_refused(tmp_path):
    # Before: "msmemscope.config: analysis: unknown analyzer 'no_entry' (available: ...)"
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""\
        import msmemscope
        msmemscope.config(plugin_path={str(BAD_PLUGINS)!r})
        try:
            msmemscope.config(analysis="leaks,no_entry")
        except ValueError as e:
            print("raised", e)
        """))
    p = subprocess.run([PY, str(script)], cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.stdout == (f"raised msmemscope.config: analysis: plugin 'no_entry' cannot be loaded: "
                        f"{BAD_PLUGINS}/libmsmemscope_plugin_no_entry.so: no entry symbol 'msmemscope_plugin'\n"), \
        p.stdout + p.stderr


# The plugin config() found is replaced, before start(), by one the
# session's host refuses: the host drops it from the selection.
SWAPPED_PLUGIN = """\
import os, shutil, sys

import msmemscope

folder, broken = sys.argv[1], sys.argv[2]
msmemscope.config(device="cpu", events="alloc,free", analysis="leaks,c_function_entry", plugin_path=folder,
                  output="out")
shutil.copy(broken, os.path.join(folder, "swap.tmp"))
os.replace(os.path.join(folder, "swap.tmp"), os.path.join(folder, "libmsmemscope_plugin_c_function_entry.so"))
msmemscope.start()
keep = bytearray(1 << 20)
msmemscope.stop()
print("script done")
"""


def test_a_selection_the_sessions_host_drops_is_named_as_config_names_it(tmp_path):
    # Before: "... plugin 'c_function_entry' (selected by --analysis) cannot
    # be loaded ...", an option the program never gave.
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(BAD_PLUGINS / "libmsmemscope_plugin_c_function_entry.so", folder)
    script = tmp_path / "script.py"
    script.write_text(SWAPPED_PLUGIN)
    p = subprocess.run([PY, str(script), str(folder), str(BAD_PLUGINS / "libmsmemscope_plugin_no_entry.so")],
                       cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True, timeout=600)
    assert "script done" in p.stdout, p.stdout + p.stderr
    dropped = [line for line in p.stderr.splitlines() if "c_function_entry" in line]
    assert dropped == [
        f"msmemscope: error: plugin 'c_function_entry' (selected by 'analysis') cannot be loaded: "
        f"{folder}/libmsmemscope_plugin_c_function_entry.so: no entry symbol 'msmemscope_plugin'; running without it"
    ], p.stderr


# What a caller of analyze() is told of an analysis out of memory: the
# command line's "--offline-memory sets the budget" named an option it
# cannot give; analyze() has no keyword for the budget.
def out_of_memory(plain, extra=""):
    return (rf"raised RuntimeError: msmemscope\.analyze: {re.escape(str(plain))}: out of memory \(an allocation "
            r"failed after \d+ MiB in use; the Python API has no keyword for the memory budget; "
            rf"msmemscope --analyze=bad_alloc_in_event --input={re.escape(str(plain))}{re.escape(extra)} "
            r"--offline-memory=<MiB> runs the analysis with one\); nothing was written back")


# 60 blocks allocated and freed: 120 events (bad_alloc_in_event throws on its 100th).
MANY_BLOCKS = DOUBLE_MALLOC.splitlines()[0] + "\n" + "".join(
    f'{2 * i + 1},MALLOC,PTA,N/A,{1000 * i},7,7,0,{hex(0x1000 * (i + 1))},'
    f'"{{allocation_id:{i + 1},addr:{hex(0x1000 * (i + 1))},size:512,total:4096,used:512}}",,\n'
    f'{2 * i + 2},FREE,PTA,N/A,{1000 * i + 500},7,7,0,{hex(0x1000 * (i + 1))},'
    f'"{{allocation_id:{i + 1},addr:{hex(0x1000 * (i + 1))},size:512,total:4096,used:0}}",,\n'
    for i in range(60))


def test_an_analysis_out_of_memory_names_the_command_line_that_sets_the_budget(recorded):
    # Before: "...; --offline-memory sets the budget); nothing was written back"
    tmp = recorded[0]
    (tmp / "many.csv").write_text(MANY_BLOCKS)
    p = offline(tmp, "bad_alloc_in_event", "many.csv", MSMEMSCOPE_PLUGIN_PATH=str(BAD_PLUGINS))
    assert re.fullmatch(out_of_memory("many.csv"), p.stdout.strip()), p.stdout
    # (a folder config() added is part of the command line to run)
    p = offline(tmp, "bad_alloc_in_event", "many.csv", TEST_CONFIG_PLUGIN_PATH=str(BAD_PLUGINS))
    assert re.fullmatch(out_of_memory("many.csv", f" --plugin-path={BAD_PLUGINS}"), p.stdout.strip()), p.stdout


def test_the_out_of_memory_command_line_gives_the_analyzer_its_options(recorded):
    # Before: "... msmemscope --analyze=bad_alloc_in_event --input=many.csv
    # --offline-memory=<MiB> runs the analysis with one": without the options
    # config() and the call gave, that command runs another analysis
    tmp = recorded[0]
    (tmp / "many.csv").write_text(MANY_BLOCKS)
    configured = json.dumps({"bad_alloc_in_event": {"fail_at": 30}})
    p = offline(tmp, "bad_alloc_in_event", "many.csv", MSMEMSCOPE_PLUGIN_PATH=str(BAD_PLUGINS),
                TEST_CONFIG_PLUGIN_OPTIONS=configured)
    assert re.fullmatch(out_of_memory("many.csv", " --plugin-option=bad_alloc_in_event.fail_at=30"),
                        p.stdout.strip()), p.stdout
    # the call's keyword, its latest word
    p = offline(tmp, "bad_alloc_in_event", "many.csv", "fail_at=50", MSMEMSCOPE_PLUGIN_PATH=str(BAD_PLUGINS),
                TEST_CONFIG_PLUGIN_OPTIONS=configured)
    assert re.fullmatch(out_of_memory("many.csv", " --plugin-option=bad_alloc_in_event.fail_at=50"),
                        p.stdout.strip()), p.stdout


def two_processes_inefficient(path):
    """Two processes in one file, each numbering its rows from 1 (as
    upstream's dumps can): block 0x10, allocated long before the operator
    that reads it, is marked early_allocation on a row of ID 1, which both
    processes have."""
    from test_analyzers_cli import row, write_csv
    rows = []
    for pid, t in (("100", 0), ("200", 1)):
        rows += [
            row(1, "MALLOC", "PTA", "N/A", 100 + t, ptr="0x0000000000000010", pid=pid,
                attr="{allocation_id:1,addr:0x10,size:4096,total:8192,used:4096}"),
            row(2, "MALLOC", "PTA", "N/A", 200 + t, ptr="0x00000000000000a0", attr="{allocation_id:2,addr:0xa0,size:64}",
                pid=pid),
            row(3, "FREE", "PTA", "N/A", 300 + t, ptr="0x00000000000000a0", attr="{allocation_id:2,addr:0xa0,size:64}",
                pid=pid),
            row(4, "OP_LAUNCH", "ATEN_START", "aten::add", 400 + t, dev="N/A", pid=pid),
            row(5, "ACCESS", "READ", "aten::add", 450 + t, ptr="0x0000000000000010", pid=pid,
                attr="{dtype:torch.float32,shape:[32, 32],size:4096,format:NCHW,type:READ,allocation_id:1}"),
            row(6, "OP_LAUNCH", "ATEN_END", "aten::add", 500 + t, dev="N/A", pid=pid),
        ]
    return write_csv(path, rows)


def test_results_not_written_back_are_a_warning_to_the_user(recorded):
    # Before: the command line's "msmemscope: warning: 1 result(s) not
    # written back into ..." was dropped by check_inefficient().
    tmp = recorded[0]
    two_processes_inefficient(tmp / "two.csv")
    p = offline(tmp, "check_inefficient", "two.csv")
    call = "        msmemscope.check_inefficient(path, **{k: json.loads(v) for k, v in kw.items()})"
    line = 1 + OFFLINE.splitlines().index(call)
    assert (f"{tmp / 'offline.py'}:{line}: UserWarning: msmemscope.check_inefficient: 1 result(s) not written back "
            "into two.csv: the ID of their row is also the ID of another process's row in the file") in \
        p.stderr.splitlines(), p.stdout + p.stderr


def test_the_clis_warnings_about_the_analysis_reach_the_user_and_not_those_about_its_own_process():
    # Before: only "--analyze:" warnings and the plugins' own were kept; a
    # plugin refused (as root: in a folder others can write) was dropped.
    from msmemscope import _offline
    stderr = ("msmemscope: warning: running as root: plugins and agent libraries that a user other than root owns "
              "or could write (they or a folder above them) are refused; run as an ordinary user where possible\n"
              "msmemscope: warning: plugin /p/libmsmemscope_plugin_x.so refused: not loaded as root: its folder /p "
              "is writable by all users\n"
              "msmemscope: warning: --analyze: d.csv has no ACCESS rows\n"
              "[msmemscope] warning: leaks: [device 0] double malloc in PTA, ptr: 0x1000\n"
              "msmemscope: error: --input: d.csv: not found\n")
    assert _offline._warnings_of(stderr) == [
        "plugin /p/libmsmemscope_plugin_x.so refused: not loaded as root: its folder /p is writable by all users",
        "d.csv has no ACCESS rows",
        "leaks: [device 0] double malloc in PTA, ptr: 0x1000",
    ]


# ---------------------------------------------------------------- 7. the host's refusal of an output folder
@pytest.mark.skipif(os.geteuid() != 0, reason="the output folder is judged so only for a run as root")
def test_an_unsafe_output_is_named_as_config_names_it(tmp_path):
    # Before: "msmemscope: error: --output: 'ww/out' is not safe ..." to a
    # program that set output="ww/out".
    (tmp_path / "ww").mkdir()
    (tmp_path / "ww").chmod(0o777)
    script = tmp_path / "script.py"
    script.write_text('import msmemscope\n'
                      'msmemscope.config(device="cpu", analysis="", output="ww/out")\n'
                      'try:\n'
                      '    msmemscope.start()\n'
                      'except RuntimeError as e:\n'
                      '    print("raised", e)\n')
    p = subprocess.run([PY, str(script)], cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("raised "), p.stdout + p.stderr
    assert (f"msmemscope: error: 'output': 'ww/out' is not safe for a run as root: its folder {tmp_path}/ww is "
            "writable by all users; give a folder that only root can write") in p.stderr.splitlines(), p.stderr


# ---------------------------------------------------------------- 8. a crash after the capture was released
# A plugin that crashed is left out and the outputs re-run from the capture,
# unless its read part was released already (aggregate=True releases it at
# once). The session's program was told "(--save-capture=true keeps it)",
# an option it has no way to give: config() has no key for it.
CRASH_AFTER_RELEASE = """\
import ctypes, sys

import msmemscope

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
msmemscope.config(device="cpu", events="alloc,free", analysis="", aggregate=True, sinks="segv_in_finish",
                  plugin_path=sys.argv[1], output="out")
msmemscope.start()
for _ in range(50000):
    libc.free(libc.malloc(64))
msmemscope.stop()
"""


def test_a_crash_after_the_release_says_what_an_api_user_can_do(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(CRASH_AFTER_RELEASE)
    p = subprocess.run([PY, str(script), str(BUILD / "tests" / "lib" / "bad_plugins")], cwd=str(tmp_path),
                       env=clean_env(), capture_output=True, text=True, timeout=600)
    errors = [line for line in p.stderr.splitlines() if line.startswith("msmemscope: error: ")]
    assert len(errors) == 1, p.stderr
    # The process named by its output folder, which the program chose (was
    # the session's internal capture, out/.msmemscope_session_py_PID_xxx/PID.0.msmcap).
    folder = only(process_dirs(tmp_path / "out")).relative_to(tmp_path)  # as config(output="out") named it
    assert errors[0] == (
        f"msmemscope: error: {folder}: plugin 'segv_in_finish' crashed (SIGSEGV) in finish; the outputs cannot be "
        "re-run without it because the capture's read part was already released (config() has no key that keeps "
        "it; run the script under the command line with --save-capture=true to keep it); the outputs of this "
        "process are incomplete"), errors[0]
    assert ".msmcap" not in p.stderr, p.stderr
