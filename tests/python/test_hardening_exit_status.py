"""Exit status (issue #29 item 5): a profiled process the tool could not
record and a plugin's host.error each make the run 70 with one
`msmemscope: error:` line naming the cause; a program that closes its
descriptors (daemon style) keeps being recorded."""
import re
import resource

from conftest import TEST_BIN
from test_hardening_limits import ARGS, run_limited

FIXTURES = TEST_BIN.parent / "lib" / "bad_plugins"


def error_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("msmemscope: error:")]


def test_a_process_whose_capture_cannot_be_opened_makes_the_run_70(tmp_path):
    # ulimit -f 16 KiB, below one capture chunk: the agent cannot open the
    # capture, the program runs unrecorded, and the host says so (70, not
    # the program's 0).
    p = run_limited(ARGS + [f"--output={tmp_path}/out", "--", TEST_BIN / "sinks_alloc_loop", 1000], tmp_path,
                    [(resource.RLIMIT_FSIZE, 16384)])
    assert p.returncode == 70, p.stdout + p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1, p.stderr
    assert re.fullmatch(r"msmemscope: error: pid \d+ \(\S*/sinks_alloc_loop 1000\) was not recorded: the file-size "
                        r"limit, ulimit -f, is smaller than one capture chunk", lines[0]), lines


def test_a_plugin_host_error_makes_the_run_70_with_one_line(cli, tmp_path):
    # error_in_event calls host.error on every event: the outputs are
    # written, and the run says once which plugin reported what.
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", "--analysis=error_in_event",
             f"--output={tmp_path}/out", "--", TEST_BIN / "sinks_alloc_loop", 100], cwd=tmp_path, check_rc=70)
    lines = error_lines(p.stderr)
    assert len(lines) == 1, p.stderr
    m = re.fullmatch(r"msmemscope: error: pid \d+: output incomplete: plugin 'error_in_event' reported an error: "
                     r"error_in_event: on purpose \(and (\d+) more\)", lines[0])
    assert m and int(m.group(1)) >= 99, lines  # one per event it saw: 100 mallocs at least
    assert re.search(r"msmemscope: pid \d+ \(\S*sinks_alloc_loop 100\) exited with code 0", p.stdout), p.stdout


def test_a_program_that_closes_its_descriptors_is_still_recorded(cli, tmp_path):
    # close_fds closes every descriptor >= 3 (the capture's too), then does
    # 100000 malloc/free pairs (many chunks written after the close) and
    # leaks 5 blocks: everything is recorded and the leak is found.
    p = cli(["--device=cpu", "--call-stack=c", "--events=alloc,free", "--analysis=leaks", f"--output={tmp_path}/out",
             "--", TEST_BIN / "close_fds", 100000], cwd=tmp_path, check_rc=0)
    assert "collection turned off" not in p.stderr, p.stderr
    assert not error_lines(p.stderr), p.stderr
    m = re.search(r"events: (\d+), dropped: (\d+)", p.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) >= 200000, p.stdout
    lines = [l.strip() for l in p.stdout.splitlines()]
    assert any(l.startswith("5 block(s), 38885 bytes, allocated at: leak_after_close") for l in lines), p.stdout


def test_a_program_that_closes_the_descriptor_and_hides_the_capture_is_named(cli, tmp_path):
    # close_fds ... hide: after closing its descriptors the program renames
    # the capture, so the agent cannot open it again: collection turns off
    # with the cause named, and the run is 70 with that cause.
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             TEST_BIN / "close_fds", 100000, "hide"], cwd=tmp_path, check_rc=70)
    cause = (r"the program closed msmemscope's capture descriptor \d+ and the capture cannot be opened again "
             r"\(No such file or directory\)")
    assert re.search(r"^\[msmemscope\] warning: collection turned off: " + cause + "$", p.stderr, re.M), p.stderr
    lines = error_lines(p.stderr)
    assert any(re.fullmatch(r"msmemscope: error: pid \d+ \(\S*/close_fds 100000 hide\) was not recorded: " + cause, l)
               for l in lines), lines
