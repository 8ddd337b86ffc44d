"""A Python API run (plain python3, no CLI) on a machine without the driver of
its device says so, as the CLI does, in the API's words: a warning at start()
(where a notebook shows it) and, in the end-of-session report, the CLI's hint
and "nothing was collected" when nothing was. The default device stays npu
(upstream's). Before, such a run printed "events: 2" and its files, and
nothing said that nothing had been recorded."""
import json
import subprocess
import textwrap

from conftest import BUILD, clean_env, no_ascend, process_dirs

PY = "/usr/bin/python3"
SIM_LIB = BUILD / "tests" / "lib" / "ascend"



FIX = 'to profile host memory, call msmemscope.config(device="cpu") before msmemscope.start()'
DEFAULT_AT_START = ("UserWarning: msmemscope: the default device is npu, but no Ascend NPU driver (libascend_hal.so) "
                    "was found on this machine, so no npu memory will be recorded; " + FIX)
DEFAULT_AT_END = ("msmemscope: warning: the default device is npu, but no Ascend NPU driver (libascend_hal.so) was "
                  "found on this machine, so no npu memory was recorded; " + FIX)
NOTHING = "msmemscope: error: nothing was collected: no process recorded any memory"

# The user's repro: torch tensors between start() and stop(), no config().
PROG = """
import sys, torch, msmemscope
{config}
msmemscope.start()
print("after start", file=sys.stderr, flush=True)
keep = [torch.randn(1000) for _ in range(3)]
msmemscope.stop()
"""


def run(tmp_path, config="", **env):
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROG.format(config=config)))
    e = clean_env(**env)
    if "LD_LIBRARY_PATH" not in env:
        e.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run([PY, "prog.py"], cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    # the program's own status: the profile's failure is the report's to say
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@no_ascend
def test_the_default_device_without_its_driver_is_said_at_start_and_at_the_end(tmp_path):
    p = run(tmp_path)
    lines = p.stderr.splitlines()
    # at start(), at the program's line, before the program goes on
    at = lines.index(f"{tmp_path}/prog.py:4: {DEFAULT_AT_START}")
    assert lines[at + 1:at + 3] == ["  msmemscope.start()", "after start"], p.stderr
    # the end-of-session report, once each
    assert lines.count(DEFAULT_AT_END) == 1 and lines.count(NOTHING) == 1, p.stderr
    assert lines.index(DEFAULT_AT_END) == lines.index(NOTHING) - 1, p.stderr
    assert "--device" not in p.stderr, p.stderr
    [d] = process_dirs(tmp_path / "memscopeDumpResults")
    s = json.loads((d / "summary.json").read_text())
    assert (s["events"], s["pools"], s["ended"]["text"]) == (2, {}, "exited with code 0"), s


@no_ascend
def test_an_explicit_npu_device_is_named_as_config_took_it(tmp_path):
    p = run(tmp_path, 'msmemscope.config(device="npu:0")')
    lines = p.stderr.splitlines()
    hint = ('device="npu:0": no Ascend NPU driver (libascend_hal.so) was found on this machine, so no npu memory '
            '{} recorded; ' + FIX)
    assert f"{tmp_path}/prog.py:4: UserWarning: msmemscope: " + hint.format("will be") in lines, p.stderr
    assert lines.count("msmemscope: warning: " + hint.format("was")) == 1, p.stderr
    assert NOTHING in lines, p.stderr


@no_ascend
def test_npu_and_cpu_say_the_hint_but_cpu_memory_is_a_profile(tmp_path):
    p = run(tmp_path, 'msmemscope.config(device=["npu", "cpu"])')
    lines = p.stderr.splitlines()
    hint = ('device="npu": no Ascend NPU driver (libascend_hal.so) was found on this machine, so no npu memory '
            '{} recorded; ' + FIX)
    assert f"{tmp_path}/prog.py:4: UserWarning: msmemscope: " + hint.format("will be") in lines, p.stderr
    assert lines.count("msmemscope: warning: " + hint.format("was")) == 1, p.stderr
    assert "nothing was collected" not in p.stderr, p.stderr


def test_cpu_says_nothing_of_drivers(tmp_path):
    p = run(tmp_path, 'msmemscope.config(device="cpu")')
    assert "driver" not in p.stderr and "nothing was collected" not in p.stderr, p.stderr


def test_with_the_simulated_driver_on_the_loader_path_nothing_is_said(tmp_path):
    p = run(tmp_path, LD_LIBRARY_PATH=str(SIM_LIB))
    assert "driver" not in p.stderr and "nothing was collected" not in p.stderr, p.stderr


@no_ascend
def test_a_driver_the_process_already_loaded_is_no_missing_driver_at_start(tmp_path):
    # loaded from a path of its own (as torch_npu's RUNPATH would), not
    # found by the loader's search: start() does not say it is missing
    p = run(tmp_path, f'import ctypes; ctypes.CDLL("{SIM_LIB}/libascend_hal.so")')
    assert "will be recorded" not in p.stderr, p.stderr
