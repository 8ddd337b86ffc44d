"""The Python API between two collection ranges tells the truth:

2. A program that set its options with config() is told of them in
   config()'s words, not the command line's (--steps, --events=alloc).
3. A device block (Ascend driver, simulated) recorded in one range and freed
   between two ranges gets its FREE, on its device, when the next range
   starts: it is not live to the end.
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


# ---------------------------------------------------------------- 3. device blocks freed between ranges
NPU_BETWEEN = """
import ctypes, os
import msmemscope

sim = {sim!r}
acl = ctypes.CDLL(os.path.join(sim, "libascendcl.so"))
fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
fw.fw_hal_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_ulonglong]
fw.fw_hal_free.argtypes = [ctypes.c_void_p]
assert acl.aclInit(None) == 0

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
    out = tmp_path / "out"
    env = {"ASCEND_SIM_DEVICE_MEM": str(128 * MiB), "LD_LIBRARY_PATH": str(SIM_LIB)}
    p, script, procdir = run(tmp_path, NPU_BETWEEN.format(sim=str(SIM_LIB), api=api, out=str(out)), env=env,
                             cli=None if api else ["--device=npu", "--analysis=leaks", "--collect-mode=deferred"])
    names = {int(m[2], 16): m[1] for m in re.finditer(r"^(\w+) 0x([0-9a-f]{16})$", p.stdout, re.M)}
    rows = read_dump(dump_files(procdir, "1")[0])
    marks = [i for i, r in enumerate(rows) if r["Event"] == "SYSTEM" and r["Event Type"] in ("START_TRACE",
                                                                                             "STOP_TRACE")]
    assert len(marks) == 4, rows
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
