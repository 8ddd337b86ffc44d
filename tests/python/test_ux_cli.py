"""Issue #19 item 6: the default device on a machine without its driver,
patterns in --opt= words (bash does not expand them there; the README's
replay/analyze commands are run as written by test_readme_tour.py), the line
that says which events --events got added, and --save-capture files that
grow as needed."""
import os
import re
import subprocess


from conftest import CLI, TEST_BIN, no_ascend, process_dirs

DEMO = TEST_BIN / "demo_train"
NPU_HINT = ("msmemscope: warning: the default device is npu, but no Ascend NPU driver (libascend_hal.so) was "
            "found on this machine, so no npu memory was recorded; to profile host memory, run with --device=cpu")


def _env():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("LD_LIBRARY_PATH", None)
    return e


def _run(args, cwd, **kw):
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=_env(), capture_output=True,
                          text=True, timeout=300, **kw)


@no_ascend
def test_default_device_without_driver_says_so_once_and_fails(tmp_path):
    p = _run(["--output=out", "--", DEMO], tmp_path)
    assert p.returncode == 70, p.stderr
    lines = p.stderr.splitlines()
    assert lines.count(NPU_HINT) == 1, p.stderr
    assert "msmemscope: error: nothing was collected: no process recorded any memory" in lines
    # The program itself ran and said so; its status is in the summary.
    assert "demo: trained 8 steps" in p.stdout
    assert re.search(r"^msmemscope: pid \d+ \(.*demo_train\) exited with code 0$", p.stdout, re.M)


@no_ascend
def test_explicit_npu_device_names_the_option_and_cpu_with_it_still_succeeds(tmp_path):
    p = _run(["--device=npu:0", "--output=out", "--", DEMO], tmp_path)
    assert p.returncode == 70
    assert ("msmemscope: warning: --device=npu:0: no Ascend NPU driver (libascend_hal.so) was found on this "
            "machine, so no npu memory was recorded; to profile host memory, run with --device=cpu") in p.stderr
    # cpu collected memory: the hint is said, but the run is a success.
    p = _run(["--device=npu,cpu", "--output=out2", "--", DEMO], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("no Ascend NPU driver") == 1
    p = _run(["--device=cpu", "--output=out3", "--", DEMO], tmp_path)
    assert p.returncode == 0 and "driver" not in p.stderr


def test_npu_memory_recorded_means_no_hint(tmp_path):
    # tests/programs/npu/train.c runs on the simulated driver (found by its
    # own rpath, not by the host): its npu memory was recorded, so no hint.
    p = _run(["--device=npu", "--output=out", "--", TEST_BIN / "npu_train"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "driver" not in p.stderr


def test_patterns_without_match_or_with_several_matches(tmp_path):
    p = _run(["--replay=nothing/msmemscope_*/capture_*.msmcap"], tmp_path)
    assert p.returncode == 2
    assert p.stderr == ("msmemscope: error: --replay: no file matches the pattern "
                        "'nothing/msmemscope_*/capture_*.msmcap'\n")
    p = _run(["--analyze=inefficient", "--input=x/*.csv"], tmp_path)
    assert p.returncode == 2
    assert p.stderr == "msmemscope: error: --input: no file matches the pattern 'x/*.csv'\n"
    for n in (1, 2):
        assert _run(["--device=cpu", "--save-capture=true", "--output=run1", "--", DEMO], tmp_path).returncode == 0
    p = _run(["--analyze=inefficient", "--input=run1/msmemscope_*/device_cpu/dump/memscope_dump_*.csv"], tmp_path)
    assert p.returncode == 2
    assert re.fullmatch(r"msmemscope: error: --input: the pattern 'run1/msmemscope_\*/device_cpu/dump/"
                        r"memscope_dump_\*\.csv' matches 2 paths \(run1/\S+\.csv, run1/\S+\.csv\); each input must "
                        r"name one file or folder\n", p.stderr), p.stderr
    # Several captures (one per process or run) are replayed one after another.
    p = _run(["--replay=run1/msmemscope_*/capture_*.msmcap", "--output=again"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "msmemscope: --replay: 2 captures match 'run1/msmemscope_*/capture_*.msmcap'" in p.stdout
    assert p.stdout.count("events: 60, dropped: 0") == 2
    assert len(process_dirs(tmp_path / "again")) == 2


def test_events_additions_are_said_in_one_line(tmp_path):
    p = _run(["--device=cpu", "--events=launch", "--output=out", "--", DEMO], tmp_path)
    assert p.returncode == 0, p.stderr
    assert ("msmemscope: warning: --events=launch: also collecting alloc, free (for --analysis=leaks); "
            "only the events listed are written") in p.stderr.splitlines()
    p = _run(["--device=cpu", "--events=access", "--analysis=none", "--output=out2", "--", DEMO], tmp_path)
    assert ("msmemscope: warning: --events=access: also collecting alloc, free (for access); only the events "
            "listed are written") in p.stderr.splitlines()
    # Nothing added: nothing said.
    p = _run(["--device=cpu", "--events=alloc,free", "--output=out3", "--", DEMO], tmp_path)
    assert "also collecting" not in p.stderr
    p = _run(["--device=cpu", "--events=launch", "--analysis=none", "--output=out4", "--", DEMO], tmp_path)
    assert "also collecting" not in p.stderr
    # -q (--log-level=error): errors only, no warnings (the root one neither).
    for quiet in (["-q"], ["--log-level=error"]):
        p = _run(["--device=cpu", "--events=launch", *quiet, "--output=out5", "--", DEMO], tmp_path)
        assert p.returncode == 0, p.stderr
        assert "warning" not in p.stderr, p.stderr


def test_saved_capture_of_a_short_run_is_not_a_32_mib_reservation(tmp_path):
    p = _run(["--device=cpu", "--save-capture=true", "--output=run", "--", DEMO], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "events: 60, dropped: 0" in p.stdout
    [cap] = list(tmp_path.glob("run/msmemscope_*/capture_*.msmcap"))
    st = cap.stat()
    # The header (4 KiB) and one 64 KiB chunk for the program's one thread.
    assert st.st_size <= 4096 + 2 * 65536, st.st_size
    assert st.st_blocks * 512 <= 4096 + 2 * 65536 + 65536, st.st_blocks
