"""The Python API between two collection ranges tells the truth:

1. config() after stop() and before the next start() changes what upstream's
   config() changes for its next events (ConfigManager::SetConfig: events,
   call_stack, level): the next range's START_TRACE says what it writes (Attr
   events:...) and its rows follow the new values. What our host fixes when
   the session opens (analysis, device, sinks...) is refused with the key
   and why.
2. A program that set its options with config() is told of them in
   config()'s words, not the command line's (--steps, --events=alloc).
3. A device block (Ascend driver, simulated) recorded in one range and freed
   between two ranges gets its FREE, on its device, when the next range
   starts: it is not live to the end.
4. With events="traceback", a Python call that began in a range and returns
   in a later one (across stop() and start()) has its python_trace row, from
   its call to its return.
"""
import json
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, CLI, clean_env, dump_files, parse_attr, process_dirs, read_dump

PY = "/usr/bin/python3"
SIM_LIB = BUILD / "tests" / "lib" / "ascend"
MiB = 1 << 20


def run(tmp_path, body, env=None, cli=None, out="out"):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    cmd = [PY, str(script)]
    if cli is not None:
        cmd = [str(CLI)] + cli + [f"--output={tmp_path / out}", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=clean_env(**(env or {})), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    dirs = process_dirs(tmp_path / out)
    assert len(dirs) == 1, dirs
    return p, script, dirs[0]


def sized(rows, size):
    return [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "HOST"
            and parse_attr(r["Attr"]).get("size") == str(size)]


def run_between_ranges(tmp_path, body, api, device, env, analysis="leaks", cli_extra=(), **fmt):
    """Runs body (formatted with api, out and fmt) alone (api: it calls
    config(device=device, ...) itself) or under the CLI (--device=device
    --analysis=analysis, cli_extra, --collect-mode=deferred). Returns the
    run, its process folder and the blocks it printed ("label 0x...":
    address -> label)."""
    p, script, procdir = run(tmp_path, body.format(api=api, out=str(tmp_path / "out"), **fmt), env=env,
                             cli=None if api else [f"--device={device}", f"--analysis={analysis}", *cli_extra,
                                                   "--collect-mode=deferred"])
    names = {int(m[2], 16): m[1] for m in re.finditer(r"^(\w+) 0x([0-9a-f]{16})$", p.stdout, re.M)}
    return p, procdir, names


def two_ranges(procdir, device):
    """The device's rows and the indices of its two ranges' START_TRACE and STOP_TRACE."""
    rows = read_dump(dump_files(procdir, device)[0])
    marks = [i for i, r in enumerate(rows) if r["Event"] == "SYSTEM" and r["Event Type"] in ("START_TRACE",
                                                                                             "STOP_TRACE")]
    assert len(marks) == 4, rows
    return rows, marks


# ---------------------------------------------------------------- 1. config() between ranges
RANGES = """\
    import warnings, msmemscope
    msmemscope.config(device="cpu", events="alloc,free", analysis="", output="out")
    msmemscope.start()
    a = bytearray(300000); del a
    msmemscope.stop()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        msmemscope.config(events="alloc", call_stack="python")
    print("WARN", [str(x.message) for x in w])
    msmemscope.start()
    b = bytearray(300001); del b
    msmemscope.stop()
    msmemscope.config(events="alloc,free", call_stack="")
    msmemscope.start()
    c = bytearray(300002); del c
    msmemscope.stop()
"""


def test_events_and_call_stack_changed_between_ranges_apply_to_the_next(tmp_path):
    # Before: config(events=...) after stop() was a RuntimeError ("cannot
    # change once the collection session has started").
    p, script, procdir = run(tmp_path, RANGES)
    # said as the host says it of a first value (config()'s words)
    assert ("WARN ['msmemscope.config: events=\"alloc\": also collecting free (for alloc); only the events listed "
            "are written']\n") in p.stdout, p.stdout
    rows = read_dump(dump_files(procdir)[0])
    starts = [r for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "START_TRACE"]
    assert [parse_attr(r["Attr"]) if r["Attr"] else {} for r in starts] == [{}, {"events": "alloc"},
                                                                            {"events": "alloc|free"}]
    first, second, third = sized(rows, 300001), sized(rows, 300002), sized(rows, 300003)
    # range 1: alloc,free, no stacks
    assert [(r["Event"], r["Call Stack(Python)"]) for r in first] == [("MALLOC", ""), ("FREE", "")]
    # range 2: events="alloc" writes no FREE row (as upstream's dump filter);
    # call_stack="python" gives the MALLOC its line
    assert [(r["Event"], r["Call Stack(Python)"]) for r in second] == [("MALLOC", f"{script}(11): <module>")]
    # range 3: both again, stacks off again
    assert [(r["Event"], r["Call Stack(Python)"]) for r in third] == [("MALLOC", ""), ("FREE", "")]
    # the FREE not written in range 2 was still collected: the block is not live at the end
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["cpu/HOST"]["final_bytes"] < 300002, summary["pools"]


def test_config_during_a_range_applies_at_the_next_start(tmp_path):
    # (the second call names events again: each config() call starts from
    # the defaults, and events would go back to alloc,free,launch)
    p, script, procdir = run(tmp_path, """\
        import warnings, msmemscope
        msmemscope.config(device="cpu", events="alloc,free", analysis="", output="out")
        msmemscope.start()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            msmemscope.config(events="alloc,free", call_stack="python")
        print("WARN", [str(x.message) for x in w])
        a = bytearray(300000)
        msmemscope.stop()
        msmemscope.start()
        b = bytearray(300001)
        msmemscope.stop()
    """)
    assert ("WARN [\"msmemscope.config: collection is on; the new 'call_stack' takes effect at the next "
            "msmemscope.start()\"]\n") in p.stdout, p.stdout
    rows = read_dump(dump_files(procdir)[0])
    assert [r["Call Stack(Python)"] for r in sized(rows, 300001) if r["Event"] == "MALLOC"] == [""]
    assert [r["Call Stack(Python)"] for r in sized(rows, 300002) if r["Event"] == "MALLOC"] == [
        f"{script}(11): <module>"]


@pytest.mark.parametrize("kw,key,why", [
    ("analysis='decompose'", "analysis",
     "the analyses run in the host process over the whole session, from its first event, so that no block is "
     "judged on part of its life"),
    ("device='cpu,npu'", "device",
     "the host keeps the devices' events it opened with for the whole session (a block freed in a later range "
     "pairs with its MALLOC on its device), and their collectors were installed then"),
])
def test_what_the_host_fixed_at_the_start_is_refused_with_why(tmp_path, kw, key, why):
    p, script, procdir = run(tmp_path, f"""\
        import msmemscope
        msmemscope.config(device="cpu", analysis="leaks", output="out")
        msmemscope.start(); msmemscope.stop()
        try:
            msmemscope.config({kw})
        except RuntimeError as e:
            print("ERR", e)
    """)
    assert (f"ERR msmemscope.config: '{key}' cannot change once the collection session has started: "
            f"msmemscope.start() at {script}:3 opened it; {why} (config() must come before the first start(), "
            "step(), take_snapshot() or tracer.start(); events, call_stack and level may change between "
            "ranges)\n") in p.stdout, p.stdout + p.stderr


def test_events_that_need_other_collectors_are_refused(tmp_path):
    # events="launch" alone (no analysis) would leave the host heap's
    # collector out, and its hooks were installed when the session opened.
    p, script, procdir = run(tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", analysis="", output="out")
        msmemscope.start(); msmemscope.stop()
        try:
            msmemscope.config(events="launch")
        except RuntimeError as e:
            print("ERR", e)
        msmemscope.start()
        a = bytearray(300000)
        msmemscope.stop()
    """)
    m = re.search(r"^ERR (.*)$", p.stdout, re.M)
    assert m, p.stdout + p.stderr
    assert m[1] == ("msmemscope.config: 'events' cannot change to 'launch' between ranges: it needs the collectors "
                    "mstx, and the session runs hal, host_heap, mstx, installed when msmemscope.start() at "
                    f"{script}:3 opened it (a process has one session: set 'events' before the first start())")
    # nothing changed: the range after it writes as before
    rows = read_dump(dump_files(procdir)[0])
    assert [r["Event"] for r in sized(rows, 300001)][:1] == ["MALLOC"]


NPU_LEVELS = """
import ctypes, os
import msmemscope

acl = ctypes.CDLL(os.path.join({sim!r}, "libascendcl.so"))
acl.aclrtLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_void_p]
assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
stream, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert acl.aclrtCreateStream(ctypes.byref(stream)) == 0
assert acl.aclrtBinaryGetFunction(None, b"add_kernel", ctypes.byref(fn)) == 0
msmemscope.config(device="npu", events="launch", level="op", analysis="", output={out!r})
for level in ("op", "kernel", "op"):
    # (events named again: each config() call starts from the defaults, and
    # theirs needs the host heap's collector, which this session has not)
    msmemscope.config(events="launch", level=level)
    msmemscope.start()
    assert acl.aclrtLaunchKernel(fn, 1, None, 0, stream) == 0
    msmemscope.stop()
"""


def test_level_changed_between_ranges_applies_to_the_next(tmp_path):
    # KERNEL_LAUNCH rows are the kernel level's (upstream's levelType): only
    # the second range, level="kernel", has one.
    p, script, procdir = run(tmp_path, NPU_LEVELS.format(sim=str(SIM_LIB), out=str(tmp_path / "out")),
                             env={"ASCEND_SIM_DEVICE_MEM": str(128 * MiB), "LD_LIBRARY_PATH": str(SIM_LIB)})
    rows = [r for f in sorted(procdir.glob("device_*/dump/memscope_dump_*.csv")) for r in read_dump(f)]
    rows.sort(key=lambda r: int(r["ID"]))
    seq = [r["Event Type"] for r in rows if r["Event Type"] in ("START_TRACE", "STOP_TRACE", "KERNEL_LAUNCH")]
    assert seq == ["START_TRACE", "STOP_TRACE", "START_TRACE", "KERNEL_LAUNCH", "STOP_TRACE", "START_TRACE",
                   "STOP_TRACE"], seq


# ---------------------------------------------------------------- 2. config()'s words
def test_warnings_name_config_keys_without_the_cli(tmp_path):
    # Before: "--events=alloc: also collecting free ...", "--steps: step 9 was
    # never reached", "leaks: the leak analysis is off when --steps selects
    # steps" to a program that never had a command line.
    p, script, procdir = run(tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", events="alloc", steps="9", output="out")
        msmemscope.start()
        for _ in range(2):
            msmemscope.step()
        msmemscope.stop()
    """)
    err = p.stderr.splitlines()
    assert ('msmemscope: warning: events="alloc": also collecting free (for analysis="leaks"); only the events '
            "listed are written") in err, p.stderr
    assert ("[msmemscope] warning: leaks: the leak analysis is off when 'steps' selects steps (only some events "
            "are collected)") in err, p.stderr
    pid = procdir.name.split("_")[1]
    assert (f"msmemscope: warning: pid {pid}: 'steps': step 9 was never reached (its last step was 3); nothing was "
            "collected for it") in err, p.stderr
    assert "--" not in p.stderr, p.stderr


def test_under_the_cli_the_same_warnings_name_its_options(tmp_path):
    p, script, procdir = run(tmp_path, """\
        import msmemscope
        msmemscope.start()
        for _ in range(2):
            msmemscope.step()
        msmemscope.stop()
    """, cli=["--device=cpu", "--events=alloc", "--steps=9", "--collect-mode=deferred"])
    err = p.stderr.splitlines()
    assert ("msmemscope: warning: --events=alloc: also collecting free (for --analysis=leaks); only the events "
            "listed are written") in err, p.stderr
    assert ("[msmemscope] warning: leaks: the leak analysis is off when --steps selects steps (only some events "
            "are collected)") in err, p.stderr
    pid = procdir.name.split("_")[1]
    assert (f"msmemscope: warning: pid {pid}: --steps: step 9 was never reached (its last step was 3); nothing was "
            "collected for it") in err, p.stderr


def test_suppress_warning_names_config_keys(tmp_path):
    (tmp_path / "s.supp").write_text("x\n")
    p, script, procdir = run(tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", suppress="s.supp", analysis="decompose", output="out")
        msmemscope.start(); msmemscope.stop()
    """)
    assert ("msmemscope: warning: suppress: the leaks analysis is not selected, so leak suppressions have no effect "
            "(select it with msmemscope.config(analysis=\"leaks\"))") in p.stderr.splitlines(), p.stderr


def test_a_plugin_over_its_time_budget_is_said_in_config_words(tmp_path):
    # Before: "... exceeded its time budget (1 s, --plugin-time-budget) ..."
    # to a program that set plugin_time_budget="1".
    fixtures = BUILD / "tests" / "lib" / "bad_plugins"
    p, script, procdir = run(tmp_path, f"""\
        import msmemscope
        msmemscope.config(device="cpu", events="alloc,free", plugin_path={str(fixtures)!r},
                          analysis="leaks,hang_in_event", plugin_time_budget="1", output="out")
        msmemscope.start()
        a = bytearray(300000)
        msmemscope.stop()
    """)
    assert [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")] == [
        "msmemscope: error: plugin 'hang_in_event' exceeded its time budget (1 s, 'plugin_time_budget') in on_event; "
        "re-running the outputs without it"], p.stderr
    assert ("  error: plugin 'hang_in_event' exceeded its time budget (1 s, 'plugin_time_budget') in on_event; the "
            "outputs were re-run without it") in p.stdout.splitlines(), p.stdout


# ---------------------------------------------------------------- 3. device blocks freed between ranges
# The simulated Ascend runtime, and its driver's halMemAlloc/halMemFree called
# from a library of the program's (fw), in a program's text (a str.format
# template with {sim}).
NPU_SIM_PRELUDE = """
import ctypes, os
import msmemscope

sim = {sim!r}
acl = ctypes.CDLL(os.path.join(sim, "libascendcl.so"))
fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
fw.fw_hal_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_ulonglong]
fw.fw_hal_free.argtypes = [ctypes.c_void_p]
assert acl.aclInit(None) == 0
"""

NPU_BETWEEN = NPU_SIM_PRELUDE + """
def alloc(label, n, dev):
    p = ctypes.c_void_p()
    assert fw.fw_hal_alloc(ctypes.byref(p), n, dev | (1 << 10) | (33 << 56)) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p

if {api!r}:
    msmemscope.config(device="npu", analysis="leaks", output={out!r})
msmemscope.start()
gone = alloc("gone", 1 << 20, 1)       # recorded in range 1 on device 1 ...
kept = alloc("kept", 12345, 1)
msmemscope.stop()
assert fw.fw_hal_free(gone) == 0      # ... and freed while collection is off
msmemscope.start()
x = alloc("x", 4096, 1)
assert fw.fw_hal_free(x) == 0
msmemscope.stop()
"""


@pytest.mark.parametrize("api", [True, False], ids=["api_alone", "under_cli"])
def test_npu_block_freed_between_ranges_is_freed_when_the_next_starts(tmp_path, api):
    # Before: the free hook told the agent no device, so the FREE was never
    # written: the block stayed live to the end, in device 1's figures and
    # its leak report.
    env = {"ASCEND_SIM_DEVICE_MEM": str(128 * MiB), "LD_LIBRARY_PATH": str(SIM_LIB)}
    p, procdir, names = run_between_ranges(tmp_path, NPU_BETWEEN, api, "npu", env, sim=str(SIM_LIB))
    rows, marks = two_ranges(procdir, "1")
    gone = [(i, r) for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE") and
            names.get(int(r["Ptr"], 16)) == "gone"]
    assert [r["Event"] for i, r in gone] == ["MALLOC", "FREE"], gone
    (i, free) = gone[1]
    assert marks[2] < i < marks[3], (marks, i)  # written when the second range starts
    aid = parse_attr(gone[0][1]["Attr"])["allocation_id"]
    assert (free["Event Type"], free["Device Id"]) == ("HAL", "1")
    assert parse_attr(free["Attr"]) == {"allocation_id": aid, "addr": free["Ptr"], "size": str(1 << 20),
                                        "shadow": "true"}
    # only the block still allocated is reported, and device 1 ends with it alone
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["1/HAL"]["final_bytes"] == 12345, summary["pools"]
    assert "  Driver memory still allocated at stop() on device 1: 1 block(s), 0.011773 Mb(s):" in p.stdout, p.stdout
    assert "1.000000 Mb" not in p.stdout, p.stdout


NPU_OFF = NPU_SIM_PRELUDE + """
hal = ctypes.CDLL(os.path.join(sim, "libascend_hal.so"))  # its own symbols: around the hooks
FLAG = 1 | (1 << 10) | (1 << 17) | (33 << 56)  # device 1, device memory, huge pages, module 33

def alloc(label, n, through=fw.fw_hal_alloc):
    p = ctypes.c_void_p()
    assert through(ctypes.byref(p), ctypes.c_ulonglong(n), ctypes.c_ulonglong(FLAG)) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p

if {api!r}:
    msmemscope.config(device="npu", analysis="leaks,decompose", output={out!r})
msmemscope.start()
x = alloc("x", 4096)                   # recorded in range 1
msmemscope.stop()
off = alloc("off", 1 << 20)            # made while collection is off ...
around = alloc("around", 8192, hal.halMemAlloc)  # (and one the hooks do not see)
msmemscope.start()
assert fw.fw_hal_free(off) == 0        # ... freed in range 2
assert fw.fw_hal_free(around) == 0
assert fw.fw_hal_free(x) == 0
msmemscope.stop()
"""


@pytest.mark.parametrize("api", [True, False], ids=["api_alone", "under_cli"])
def test_npu_block_made_while_off_is_known_as_a_block_recorded_in_a_range(tmp_path, api):
    # Before: the shadow MALLOC said shadow:true alone (no owner, page_type,
    # alloc_type: the decomposition's owner CANN@<module>); and the free of a
    # block the hooks never saw, after collection had been off, was said to
    # be of a block "made before the hooks went in: ... before the first
    # msmemscope.start()" without the CLI, when the hooks had been in since.
    env = {"ASCEND_SIM_DEVICE_MEM": str(128 * MiB), "LD_LIBRARY_PATH": str(SIM_LIB)}
    p, procdir, names = run_between_ranges(tmp_path, NPU_OFF, api, "npu", env, analysis="leaks,decompose",
                                           sim=str(SIM_LIB))
    rows, _ = two_ranges(procdir, "1")
    mem = [(names.get(int(r["Ptr"], 16)), r["Event"], parse_attr(r["Attr"])) for r in rows
           if r["Event"] in ("MALLOC", "FREE")]
    assert [m[:2] for m in mem] == [("x", "MALLOC"), ("off", "MALLOC"), ("off", "FREE"), ("x", "FREE")], mem
    x, off = mem[0][2], mem[1][2]
    extras = {k: v for k, v in x.items() if k not in ("allocation_id", "addr", "size", "used", "process_used",
                                                      "device_used")}
    assert extras["owner"].startswith("CANN@") and extras["alloc_type"] == "alloc", x
    assert off == {"allocation_id": off["allocation_id"], "addr": off["addr"], "size": str(1 << 20),
                   "shadow": "true", **extras}, (off, x)
    assert mem[2][2]["allocation_id"] == off["allocation_id"] and mem[2][2]["device_used"] == "4096", mem
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["1/HAL"]["peak_bytes"] == 4096 + (1 << 20), summary["pools"]
    # the decomposition knows both blocks as the module's (an owner by the flag word before, which a shadow
    # row does not carry)
    table = p.stdout.split("decompose: memory by owner on device 1:\n", 1)[1].splitlines()[1:]
    owners = [m.groups() for m in map(re.compile(r"  (\S+) +(\d+) +(\d+) +(\d+)").fullmatch, table[:3]) if m]
    assert owners == [(extras["owner"], "0", str(4096 + (1 << 20)), "2")], table[:3]
    # the block made around the hooks: said, with every cause that can be true
    made = ("made before the hooks went in (without the CLI, before the first msmemscope.start()), through an entry "
            "point the hooks do not cover, or while collection was off and the agent could not remember them"
            if api else "made through an entry point the hooks do not cover, or while collection was off and the "
                        "agent could not remember them")
    said = [line for line in p.stderr.splitlines() if "never recorded" in line]
    assert said == [f"[msmemscope] warning: 1/HAL: 1 free(s) of block(s) whose allocation was never recorded ({made}) "
                    "were not written; the pool's figures and the leak analysis leave those blocks out"], p.stderr


# ---------------------------------------------------------------- 4. a Python call across stop()/start()
ACROSS = """\
    import msmemscope
    msmemscope.config(device="cpu", events="traceback", analysis="", output="out")
    def off(): return 0
    def across():
        msmemscope.stop()
        off()
        msmemscope.start()
        return 1
    def after(): return 2
    def begins_off():
        msmemscope.start()
        return 3
    msmemscope.start()
    across()
    after()
    msmemscope.stop()
    off()
    begins_off()
    msmemscope.stop()
"""


def test_a_call_running_across_stop_and_start_has_its_row(tmp_path):
    # Before: across() had no python_trace row: its profile function went at
    # stop(), and at start() it was taken as a frame whose call was never
    # seen. A call the trace saw begin in a range and end in a later one ran
    # from its call to its return: its row says so. Calls that began while
    # collection was off (off(), begins_off()) have no row, as before: the
    # trace never saw them begin.
    p, script, procdir = run(tmp_path, ACROSS)
    rows = read_dump(dump_files(procdir)[0])
    marks = [int(r["Timestamp(ns)"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] in
             ("START_TRACE", "STOP_TRACE")]
    assert len(marks) == 6, marks
    lines = dump_files(procdir, kind="python_trace")[0].read_text().splitlines()
    trace = [l.rsplit(",", 4) for l in lines[1:]]
    names = [t[0] for t in trace]
    assert names == [f"{script}(4): across", f"{script}(9): after"], names
    start, end = int(trace[0][1]), int(trace[0][2])
    assert start < marks[1] and end > marks[2], (start, end, marks)  # called in range 1, returned in range 2
    assert marks[2] < int(trace[1][1]) <= int(trace[1][2]) < marks[3]


CUDA_ENV = {"LD_LIBRARY_PATH": str(BUILD / "tests" / "lib" / "cuda")}  # the simulated driver and runtime
CUDA_BETWEEN = """
import ctypes, os
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda", analysis="leaks", output={out!r})
rt = ctypes.CDLL("libfakecudart.so")           # the simulated runtime makes device 0's context current
assert rt.fakertInit() == 0 and rt.fakertSetDevice(0) == 0
cu = ctypes.CDLL("libcuda.so.1")
def alloc(label, n):
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(n)) == 0
    print(f"{{label}} 0x{{d.value:016x}}", flush=True)
    return d
msmemscope.start()
gone = alloc("gone", 1 << 20)          # recorded in range 1 ...
kept = alloc("kept", 12345)
msmemscope.stop()
assert cu.cuMemFree_v2(gone) == 0     # ... and freed while collection is off
msmemscope.start()
x = alloc("x", 2 << 20)                # larger than gone: a new address (the rows are named by address,
assert cu.cuMemFree_v2(x) == 0        # and the driver gives gone's range again to a block that fits)
msmemscope.stop()
"""


@pytest.mark.parametrize("api", [True, False], ids=["api_alone", "under_cli"])
def test_cuda_block_freed_between_ranges_is_freed_when_the_next_starts(tmp_path, api):
    # Before: the cuda hook recorded nothing for a free while collection was
    # off, and the block stayed live to the end.
    p, procdir, names = run_between_ranges(tmp_path, CUDA_BETWEEN, api, "cuda", CUDA_ENV)
    rows, marks = two_ranges(procdir, "0")
    gone = [(i, r) for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE") and
            names.get(int(r["Ptr"], 16)) == "gone"]
    assert [r["Event"] for i, r in gone] == ["MALLOC", "FREE"], gone
    (i, free) = gone[1]
    assert marks[2] < i < marks[3], (marks, i)
    assert (free["Event Type"], free["Device Id"]) == ("HAL", "0")
    assert parse_attr(free["Attr"]) == {"allocation_id": parse_attr(gone[0][1]["Attr"])["allocation_id"],
                                        "addr": free["Ptr"], "size": str(1 << 20), "shadow": "true"}
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["0/HAL"]["final_bytes"] == 12345, summary["pools"]


CUDA_OFF = """
import ctypes, os
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda,cpu", analysis="leaks", output={out!r})
rt = ctypes.CDLL("libfakecudart.so")           # the simulated runtime makes device 0's context current
assert rt.fakertInit() == 0 and rt.fakertSetDevice(0) == 0
cu = ctypes.CDLL("libcuda.so.1")             # (each cu* is looked up at its first call: after start())
def alloc(label, n):
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(n)) == 0
    print(f"{{label}} 0x{{d.value:016x}}", flush=True)
    return d
def pinned(label, n):
    p = ctypes.c_void_p()
    assert cu.cuMemAllocHost_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p
if not {api!r}:
    early = alloc("early", 3000)       # under the CLI, before the first start() (--collect-mode=deferred)
msmemscope.start()
a = alloc("a", 1000)                   # recorded in range 1
hgone = pinned("hgone", 4096)          # pinned, recorded in range 1 and freed while collection is off
if not {api!r}:
    assert cu.cuMemFree_v2(early) == 0
msmemscope.stop()
assert cu.cuMemFreeHost(hgone) == 0
off = alloc("off", 1 << 20)            # allocated while collection is off ...
brief = alloc("brief", 4096)           # (allocated and freed while it is off: no rows; larger than early,
                                       # freed, whose range the driver would give it: the rows are named by address)
assert cu.cuMemFree_v2(brief) == 0
host = pinned("host", 8192)            # pinned host memory, the same
msmemscope.start()
assert cu.cuMemFree_v2(off) == 0       # ... and freed in range 2
assert cu.cuMemFreeHost(host) == 0
msmemscope.stop()
"""


@pytest.mark.parametrize("api", [True, False], ids=["api_alone", "under_cli"])
def test_cuda_block_allocated_between_ranges_is_a_shadow_malloc_at_the_next_start(tmp_path, api):
    # Before: the cuda hook did not remember a block allocated while
    # collection was off (the HAL hook does: a MALLOC with Attr shadow:true
    # when collection starts), so its FREE in the next range paired with
    # nothing and device 0's figures never had the block.
    p, procdir, names = run_between_ranges(tmp_path, CUDA_OFF, api, "cuda,cpu", CUDA_ENV)

    def rows_of(dev):
        rows, marks = two_ranges(procdir, dev)
        mem = [(i, names.get(int(r["Ptr"], 16)), r["Event"], r["Event Type"], parse_attr(r["Attr"]))
               for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE")]
        return marks, mem

    marks, mem = rows_of("0")
    # (the simulated driver frees "a" at exit, after the last stop(): that
    # FREE, shadow:true, follows the last mark)
    mem = [m for m in mem if m[0] < marks[3]]
    if not api:
        # allocated before the first start(): a shadow MALLOC at it, which its FREE in range 1 pairs with
        (i_e, _, _, _, early_m), (_, _, _, _, a_m), (i_ef, _, _, _, early_f) = mem[:3]
        assert [m[1:3] for m in mem[:3]] == [("early", "MALLOC"), ("a", "MALLOC"), ("early", "FREE")], mem
        assert marks[0] < i_e < i_ef < marks[1] and (early_m["size"], early_m["shadow"]) == ("3000", "true")
        assert early_f["allocation_id"] == early_m["allocation_id"] and a_m["device_used"] == "4000", (early_f, a_m)
        mem = [m for m in mem if m[1] != "early"]
    assert [(n, e, t) for i, n, e, t, a in mem] == [
        ("a", "MALLOC", "HAL"),
        ("off", "MALLOC", "HAL"),               # shadow, written at the second start()
        ("off", "FREE", "HAL"),
    ], mem
    (i_a, _, _, _, a_m), (i_off, _, _, _, off_m), (i_free, _, _, _, off_f) = mem
    assert marks[0] < i_a < marks[1] and marks[2] < i_off < i_free < marks[3], (marks, mem)
    assert a_m.get("shadow") is None
    assert parse_attr(read_dump(dump_files(procdir, "0")[0])[i_off]["Attr"]) == {
        "allocation_id": off_m["allocation_id"], "addr": off_m["addr"], "size": str(1 << 20), "shadow": "true",
        "driver": "cuda", "alloc_type": "alloc"}  # (the Attr of a block recorded in a range)
    # its FREE pairs with it: device 0 had both blocks, and ends with "a" alone
    assert off_f["allocation_id"] == off_m["allocation_id"]
    assert (off_f["size"], off_f["device_used"]) == (str(1 << 20), "1000"), off_f
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["0/HAL"]["final_bytes"] == 1000, summary["pools"]
    assert summary["pools"]["0/HAL"]["peak_bytes"] == 1000 + (1 << 20), summary["pools"]
    assert "free(s) of block(s) whose allocation was never recorded" not in p.stderr, p.stderr

    marks, mem = rows_of("cpu")
    pinned = [(i, n, e, a.get("shadow"), a.get("allocation_id")) for i, n, e, t, a in mem if t == "HOST_PINNED"]
    assert [x[1:4] for x in pinned] == [("hgone", "MALLOC", None), ("hgone", "FREE", "true"),
                                        ("host", "MALLOC", "true"), ("host", "FREE", None)], pinned
    assert marks[0] < pinned[0][0] < marks[1] and pinned[0][4] == pinned[1][4], (marks, pinned)
    assert marks[2] < pinned[1][0] < pinned[2][0] < pinned[3][0] < marks[3] and pinned[2][4] == pinned[3][4]
    assert summary["pools"]["cpu/HOST_PINNED"]["final_bytes"] == 0, summary["pools"]


# The simulated CUDA driver (device 0 current) and cuMemCreate of 2 MiB
# handles, in a program's text (a str.format template).
CUDA_VMM_PRELUDE = """
rt = ctypes.CDLL("libfakecudart.so")
assert rt.fakertInit() == 0 and rt.fakertSetDevice(0) == 0
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Flags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Loc),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", Flags)]
prop = Prop(type=1, location=Loc(type=1, id=0))   # pinned, on device 0
MB2 = 2 << 20
def create(label):
    h = ctypes.c_uint64()
    assert cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(MB2), ctypes.byref(prop), ctypes.c_ulonglong(0)) == 0
    print(f"{{label}} 0x{{h.value:016x}}", flush=True)
    return h
"""

VMM_OFF = """
import ctypes
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda", analysis="leaks", output={out!r})
""" + CUDA_VMM_PRELUDE.lstrip("\n") + """def release(h):
    assert cu.cuMemRelease(h) == 0
va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(MB2), ctypes.c_size_t(0), ctypes.c_uint64(0),
                              ctypes.c_ulonglong(0)) == 0
print(f"map 0x{{va.value:016x}}", flush=True)
msmemscope.start()
h1 = create("h1")                      # recorded in range 1 ...
assert cu.cuMemMap(va, ctypes.c_size_t(MB2), ctypes.c_size_t(0), h1, ctypes.c_ulonglong(0)) == 0
msmemscope.stop()
assert cu.cuMemUnmap(va, ctypes.c_size_t(MB2)) == 0   # (its mapping too)
release(h1)                            # ... released while collection is off
h2 = create("h2")                      # created while it is off ...
msmemscope.start()
release(h2)                            # ... and released in range 2
msmemscope.stop()
"""


@pytest.mark.parametrize("api", [True, False], ids=["api_alone", "under_cli"])
def test_cuda_physical_memory_between_ranges(tmp_path, api):
    # Before: cuMemCreate/cuMemRelease while collection was off wrote
    # nothing: h1 stayed live to the end, and h2's release in range 2 paired
    # with nothing (device 0 never had its 2 MiB).
    p, procdir, names = run_between_ranges(tmp_path, VMM_OFF, api, "cuda", CUDA_ENV)
    rows, marks = two_ranges(procdir, "0")
    mem = [(i, names.get(int(r["Ptr"], 16)), r["Event"], parse_attr(r["Attr"])) for i, r in enumerate(rows)
           if r["Event"] in ("MALLOC", "FREE")]
    # the shadow FREEs of range 1's blocks come first at the second start(), in no set order
    assert [(n, e, a.get("shadow")) for i, n, e, a in mem[:2]] == [("h1", "MALLOC", None), ("map", "MALLOC", None)]
    assert sorted((n, e, a.get("shadow")) for i, n, e, a in mem[2:4]) == [("h1", "FREE", "true"),
                                                                         ("map", "FREE", "true")], mem
    assert [(n, e, a.get("shadow")) for i, n, e, a in mem[4:]] == [("h2", "MALLOC", "true"), ("h2", "FREE", None)]
    assert marks[0] < mem[0][0] < mem[1][0] < marks[1] and marks[2] < mem[2][0] and mem[5][0] < marks[3], (marks, mem)
    ids = {(n, e): a["allocation_id"] for i, n, e, a in mem}
    assert ids["h1", "MALLOC"] == ids["h1", "FREE"] and ids["map", "MALLOC"] == ids["map", "FREE"], ids
    assert ids["h2", "MALLOC"] == ids["h2", "FREE"] and mem[5][3]["device_used"] == "0", mem
    summary = json.loads((procdir / "summary.json").read_text())
    assert summary["pools"]["0/HAL"]["final_bytes"] == 0, summary["pools"]
    assert "free(s) of block(s) whose allocation was never recorded" not in p.stderr, p.stderr
