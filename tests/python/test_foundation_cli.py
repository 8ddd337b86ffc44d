"""Foundation: the CLI runs real programs on the cpu device and writes the
memscope_dump CSV of COMPAT §4 in the layout of §3."""
import glob
import json
import os
import re
import stat
from pathlib import Path

import pytest

from conftest import BUILD, TEST_BIN, dump_files, log_messages, no_ascend, process_dirs, read_dump, run_cli

KNOWN_SIZES = [1001, 3006, 1003, 1004, 1005, 1024, 1006, 1007, 4032, 1009, 1010]


def profile(tmp_path, prog_args, extra=(), rc=None):
    out = tmp_path / "out"
    p = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={out}", *extra, "--", *prog_args],
                cwd=tmp_path, check_rc=rc)
    return p, out


def test_known_allocations_give_exactly_those_rows(tmp_path):
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], rc=7)
    dirs = process_dirs(out)
    assert len(dirs) == 1
    d = dirs[0]
    assert re.fullmatch(r"msmemscope_(\d+)_(\d{14})_cpu", d.name)
    pid, ts = re.fullmatch(r"msmemscope_(\d+)_(\d{14})_cpu", d.name).groups()
    files = dump_files(d)
    assert [f.name for f in files] == [f"memscope_dump_{ts}.csv"]
    assert json.loads((d / "config.json").read_text())["device"] == ["cpu"]
    assert (d / "msmemscope_logs" / f"msmemscope_{ts}.log").exists()

    rows = read_dump(files[0])
    mallocs = [r for r in rows if r["Event"] == "MALLOC"]
    frees = [r for r in rows if r["Event"] == "FREE"]
    assert [int(r["attr"]["size"]) for r in mallocs] == KNOWN_SIZES
    assert all(r["Event Type"] == "HOST" and r["Device Id"] == "cpu" for r in mallocs + frees)
    assert all(r["Process Id"] == pid for r in rows)
    # every free pairs with its malloc by allocation_id, with the malloc's size
    by_id = {r["attr"]["allocation_id"]: r for r in mallocs}
    assert len(by_id) == len(mallocs)
    for f in frees:
        m = by_id[f["attr"]["allocation_id"]]
        assert f["Ptr"] == m["Ptr"]
        assert f["attr"]["size"] == m["attr"]["size"]
        assert int(f["Timestamp(ns)"]) >= int(m["Timestamp(ns)"])
    freed = {f["attr"]["allocation_id"] for f in frees if f["attr"].get("shadow") != "true"}
    assert [int(m["attr"]["size"]) for m in mallocs if m["attr"]["allocation_id"] not in freed] == [1010]
    # the block live at exit gets a FREE with shadow:true (upstream's, COMPAT §8), the last row
    assert [(f["attr"]["size"], f["attr"]["shadow"]) for f in frees if "shadow" in f["attr"]] == [("1010", "true")]
    assert rows[-1]["attr"].get("shadow") == "true"
    # realloc: a FREE of the 1003 block comes before the 1004 block's MALLOC
    order = [(r["Event"], int(r["attr"]["size"])) for r in rows if r["Event"] in ("MALLOC", "FREE")]
    assert order.index(("FREE", 1003)) == order.index(("MALLOC", 1004)) - 1
    # rows in time order, IDs increasing
    assert [int(r["ID"]) for r in rows] == sorted(int(r["ID"]) for r in rows)
    ts_list = [int(r["Timestamp(ns)"]) for r in rows]
    assert ts_list == sorted(ts_list)
    # running total of live host bytes
    used = 0
    for r in rows:
        if r["Event"] == "MALLOC":
            used += int(r["attr"]["size"])
        elif r["Event"] == "FREE":
            used -= int(r["attr"]["size"])
        if r["Event"] in ("MALLOC", "FREE") and r["attr"].get("shadow") != "true":  # shadow rows: no used
            assert int(r["attr"]["used"]) == used
    assert used == 0  # after the shadow FREE of the block live at exit
    assert rows[0]["Event"] == "SYSTEM" and rows[0]["Event Type"] == "START_TRACE"
    assert f"pid {pid} (" in p.stdout and "exited with code 7" in p.stdout
    assert f"output: {out}/{d.name}" in p.stdout
    assert "cpu/HOST: peak 14.8 KiB, final 1010 B" in p.stdout


def test_exit_codes_and_signals_pass_through(tmp_path):
    for args, rc, how in [(["code", "5"], 5, "exited with code 5"),
                          (["signal", "9"], 137, "killed by signal 9 (SIGKILL)"),
                          (["signal", "15"], 143, "killed by signal 15 (SIGTERM)"),
                          (["abort"], 134, "killed by signal 6 (SIGABRT)")]:
        sub = tmp_path / "_".join(args)
        sub.mkdir()
        p, out = profile(sub, [TEST_BIN / "exit_kinds", *args], rc=rc)
        assert how in p.stdout, p.stdout
        rows = read_dump(dump_files(process_dirs(out)[0])[0])
        assert [int(r["attr"]["size"]) for r in rows if r["Event"] == "MALLOC" and r["attr"]["size"] == "2024"] == [2024]


def test_missing_or_non_executable_program(tmp_path):
    p = run_cli(["--device=cpu", f"--output={tmp_path}/o", "--", "./nope"], cwd=tmp_path, check_rc=2)
    assert "msmemscope: error: program './nope' not found\n" in p.stderr
    p = run_cli(["--device=cpu", f"--output={tmp_path}/o", "--", "no_such_program_xyz"], cwd=tmp_path, check_rc=2)
    assert "msmemscope: error: program 'no_such_program_xyz' not found in PATH\n" in p.stderr
    f = tmp_path / "plain.txt"
    f.write_text("x")
    f.chmod(0o644)
    p = run_cli(["--device=cpu", f"--output={tmp_path}/o", "--", "./plain.txt"], cwd=tmp_path, check_rc=2)
    assert "msmemscope: error: program './plain.txt' is not executable\n" in p.stderr
    assert not (tmp_path / "o").exists()


def test_bad_options_write_nothing(tmp_path):
    cases = [
        (["--device=gpu"], "msmemscope: error: --device: invalid value 'gpu' (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})\n"),
        (["--evnts=alloc"], "msmemscope: error: unknown option '--evnts'; did you mean '--events'?\n"),
        (["--data-format=xml"], "msmemscope: error: --data-format: invalid value 'xml' (allowed: csv, db)\n"),
        (["--steps=1,2,3,4,5,6"], "msmemscope: error: --steps: at most 5 steps, got 6\n"),
    ]
    for opts, msg in cases:
        p = run_cli([*opts, f"--output={tmp_path}/o", "--", str(TEST_BIN / "known_allocs")], cwd=tmp_path, check_rc=2)
        assert msg in p.stderr, p.stderr
        assert not (tmp_path / "o").exists()


def test_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run_cli(["--device=cpu", f"--output={blocker}/sub", "--", str(TEST_BIN / "known_allocs")], cwd=tmp_path,
                check_rc=2)
    assert f"msmemscope: error: --output: cannot create or write '{blocker}/sub': Not a directory\n" in p.stderr


def test_help_version_and_plugins(tmp_path):
    p = run_cli(["--help"], cwd=tmp_path, check_rc=0)
    for opt in ["--steps", "--device", "--level", "--events", "--call-stack", "--collect-mode", "--analysis",
                "--format", "--watch", "--output-path", "--log-level", "--compare", "--input-path", "--config",
                "--list-plugins", "--sinks", "--replay"]:
        assert opt in p.stdout
    assert "npu, npu:{0..31}, cpu" in p.stdout
    p = run_cli(["-V"], cwd=tmp_path, check_rc=0)
    assert re.fullmatch(r"msmemscope \d+\.\d+\.\d+\n", p.stdout)
    p = run_cli(["--list-plugins"], cwd=tmp_path, check_rc=0)
    assert re.search(r"^csv +sink +1\.0\.0 +/\S+/libmsmemscope_plugin_csv\.so$", p.stdout, re.M)
    assert re.search(r"^host_heap +collector +1\.0\.0 +/\S+libmsmemscope_plugin_host_heap\.so$", p.stdout, re.M)


def test_root_warning(tmp_path):
    p, _ = profile(tmp_path, [TEST_BIN / "known_allocs"], rc=0)
    if os.geteuid() == 0:
        assert ("msmemscope: warning: running as root: plugins and agent libraries that a user other than root "
                "owns or could write (they or a folder above them) are refused") in p.stderr
    else:
        assert "running as root" not in p.stderr


ROOT_WARNING = ("running as root: plugins and agent libraries that a user other than root owns or could write "
                "(they or a folder above them) are refused; run as an ordinary user where possible")


def test_root_warning_is_in_the_log_too(tmp_path):
    """Said before the process's log exists: the log repeats it first, with
    the time the console said it, so a reader of the log alone sees it."""
    if os.geteuid() != 0:
        pytest.skip("the warning is said to root only; these tests run as an ordinary user")
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs"], rc=0)
    assert p.stderr.splitlines().count(f"msmemscope: warning: {ROOT_WARNING}") == 1, p.stderr
    assert p.stderr.count("running as root") == 1, p.stderr  # once on the console
    log = log_messages(process_dirs(out)[0])
    said = [m for _, m in log]
    assert said.count(f"[warning] {ROOT_WARNING}") == 1, said
    profiling = next(i for i, m in enumerate(said) if m.startswith("[info] profiling pid "))
    warned = said.index(f"[warning] {ROOT_WARNING}")
    assert warned < profiling and log[warned][0] <= log[profiling][0], log


def test_the_log_ends_with_the_report_the_console_printed(tmp_path):
    """The end-of-run report (how the process ended, its folder, counts,
    totals, the files written) is the log's last lines, in the console's words."""
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], rc=7)
    report = p.stdout.splitlines()
    d = process_dirs(out)[0]
    assert report[0].startswith("msmemscope: pid ") and f"  output: {d}" in report, report
    assert any(r.startswith("  files (in ") for r in report), report
    said = [m for _, m in log_messages(d)]
    assert said[-len(report):] == [f"[info] {r}" for r in report], said


def test_the_report_lists_the_log_without_a_size_it_would_outgrow(tmp_path):
    """The report is appended to the log after it is printed: the size read
    before (the log without the report) was false once the run ended."""
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], rc=7)
    d = process_dirs(out)[0]
    (log,) = (d / "msmemscope_logs").glob("msmemscope_*.log")
    report = p.stdout.splitlines()
    listed = [r for r in report if r.startswith("    msmemscope_logs/")]
    assert listed == [f"    msmemscope_logs/{log.name} (the log, which this report is appended to)"], report
    # the other files keep their sizes
    assert [r for r in report if re.fullmatch(r"    config\.json \([0-9.]+ (B|KiB)\)", r)], report
    said = [m for _, m in log_messages(d)]
    assert said[-len(report):] == [f"[info] {r}" for r in report], said


@pytest.mark.parametrize("level", ["warn", "error"])
def test_the_report_is_in_the_log_whatever_the_log_level(tmp_path, level):
    """The level filters the log's messages, as it does the console's
    warnings; the report is printed on stdout at every level, so the log
    keeps it at every level too."""
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], extra=[f"--log-level={level}"], rc=7)
    report = p.stdout.splitlines()
    assert report[0].startswith("msmemscope: pid "), report
    said = [m for _, m in log_messages(process_dirs(out)[0])]
    assert said[-len(report):] == [f"[info] {r}" for r in report], said
    assert not [m for m in said[:-len(report)] if m.startswith("[info] ")], said  # the level still filters


NPU_NOT_FOUND = ("--device=npu: no Ascend NPU driver (libascend_hal.so) was found on this machine, so no npu "
                 "memory was recorded; to profile host memory, run with --device=cpu")
NOTHING = "nothing was collected: no process recorded any memory"


@no_ascend
@pytest.mark.parametrize("quiet", [False, True])
def test_the_log_says_why_nothing_was_collected(tmp_path, quiet):
    """Said of the whole run after the report: the missing driver and the
    failure are in the process's log too (with -q as well, as on stderr)."""
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs"], extra=["--device=npu"] + (["-q"] if quiet else []), rc=70)
    err = p.stderr.splitlines()
    assert err[-2:] == [f"msmemscope: warning: {NPU_NOT_FOUND}", f"msmemscope: error: {NOTHING}"], p.stderr
    said = [m for _, m in log_messages(process_dirs(out)[0])]
    assert said[-3:] == [f"[info] {p.stdout.splitlines()[-1]}", f"[warning] {NPU_NOT_FOUND}", f"[error] {NOTHING}"], said


def test_every_process_log_ends_with_the_table_of_processes_and_the_index_error(tmp_path):
    """A run of several processes has no log of its own: what is said of it
    as a whole (its table, an index.html that could not be written) is in
    each process's log, where a reader of any one of them looks."""
    script = tmp_path / "user.sh"
    script.write_text(f"{TEST_BIN / 'known_allocs'}\n{TEST_BIN / 'known_allocs'} 3\n")
    out = tmp_path / "out"
    (out / "index.html").mkdir(parents=True)  # renaming the new index over it fails
    p = run_cli(["--device=cpu", "--analysis=", f"--output={out}", "bash", str(script)], cwd=tmp_path, check_rc=70)
    lines = p.stdout.splitlines()
    dirs = process_dirs(out)  # bash, and each child before and after its exec
    table = lines[lines.index(f"msmemscope: {len(dirs)} processes"):]
    assert len(dirs) > 1 and len(table) == len(dirs) + 2 and table[1].startswith("  pid "), p.stdout
    error = f"index: cannot write {out}/index.html: Is a directory"
    assert p.stderr.splitlines()[-1] == f"msmemscope: error: {error}", p.stderr
    for d in dirs:
        said = [m for _, m in log_messages(d)]
        assert said[-len(table) - 1:] == [f"[info] {l}" for l in table] + [f"[error] {error}"], (d, said)


def test_bash_user_script_form(tmp_path):
    script = tmp_path / "user.sh"
    script.write_text(f"{TEST_BIN / 'known_allocs'}\n{TEST_BIN / 'known_allocs'} 3\nexit 4\n")
    out = tmp_path / "out"
    p = run_cli(["--device=cpu", "--analysis=", f"--output={out}", "bash", str(script)], cwd=tmp_path, check_rc=4)
    with_known = []
    for d in process_dirs(out):
        rows = read_dump(dump_files(d)[0])
        sizes = [int(r["attr"]["size"]) for r in rows if r["Event"] == "MALLOC"]
        if 1001 in sizes and 4032 in sizes:
            with_known.append(d)
    assert len(with_known) == 2


def test_analyze_of_a_runs_dump_is_in_that_runs_log(tmp_path):
    """--analyze writes its results back into the run's dump: the run's log,
    where its reader looks, ends with what the analysis said. A dump outside
    a run folder has no log, and none is made for it."""
    p, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], rc=7)
    d = process_dirs(out)[0]
    (dump,) = dump_files(d)
    a = run_cli(["--analyze=leaks", f"--input={dump}"], cwd=tmp_path, check_rc=0)
    said = a.stdout.splitlines()
    assert said[0] == f"msmemscope: analysed {dump} ({len(read_dump(dump))} rows) with leaks", a.stdout
    log = [m for _, m in log_messages(d)]
    # (with the warnings it gave before reading the dump: the run as root)
    notes = said_in_log_words(a.stderr)
    assert log[-len(said) - len(notes) - len(p.stdout.splitlines()):] == \
        [f"[info] {l}" for l in p.stdout.splitlines()] + notes + [f"[info] {l}" for l in said], log

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = elsewhere / dump.name
    copy.write_bytes(dump.read_bytes())
    a = run_cli(["--analyze=leaks", f"--input={copy}"], cwd=tmp_path, check_rc=0)
    first = a.stdout.splitlines()[0]
    assert first == f"msmemscope: analysed {copy} ({len(read_dump(copy))} rows) with leaks", a.stdout
    assert sorted(x.name for x in elsewhere.iterdir()) == [dump.name]
    assert [m for _, m in log_messages(d)] == log  # the run's log is left alone


def said_in_log_words(stderr):
    """The warnings and errors on stderr as a process's log writes them
    ("[warning] text", "[error] text"), in the console's order."""
    prefixes = {"msmemscope: warning: ": "[warning] ", "msmemscope: error: ": "[error] "}
    return [prefixes[m.group(1)] + m.group(2)
            for m in re.finditer(r"^(msmemscope: (?:warning|error): )(.*)$", stderr, re.M)]


@pytest.mark.parametrize("level", ["info", "warn"])
def test_each_replayed_process_log_says_which_captures_the_pattern_matched(tmp_path, level):
    """--replay=PATTERN prints the captures it matched before any replayed
    process's log exists: each of those logs carries the line too, at every
    level (it is on stdout, as the report), and stdout has it once."""
    for _ in range(2):
        run_cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--save-capture=true", "--output=run1", "--",
                 TEST_BIN / "known_allocs", "0"], cwd=tmp_path, check_rc=0)
    p = run_cli(["--replay=run1/msmemscope_*/capture_*.msmcap", "--output=again", f"--log-level={level}"],
                cwd=tmp_path, check_rc=0)
    line = "msmemscope: --replay: 2 captures match 'run1/msmemscope_*/capture_*.msmcap'"
    assert p.stdout.splitlines().count(line) == 1, p.stdout
    dirs = process_dirs(tmp_path / "again")
    assert len(dirs) == 2, dirs
    warned = said_in_log_words(p.stderr)
    for d in dirs:
        said = [m for _, m in log_messages(d)]
        assert said.count(f"[info] {line}") == 1, (d, said)
        # with what the console said before it (the run as root), first
        i = said.index(f"[info] {line}")
        assert all(m in warned for m in said[:i]), (d, said)
        if level == "info":
            assert said[i + 1].startswith("[info] profiling pid "), (d, said)


BAD_PLUGINS = BUILD / "tests" / "lib" / "bad_plugins"
WRONG_ABI = f"{BAD_PLUGINS}/libmsmemscope_plugin_wrong_abi.so: wrong ABI version: got 2.0, supported 1.4"


class RecordedRun:
    """A run's process folder and its dump, for --analyze with the
    bad_plugins folder's plugins: `analyze` returns the CompletedProcess and
    the lines it added to the run's log."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        _, out = profile(tmp_path, [TEST_BIN / "known_allocs", "7"], rc=7)
        self.dir = process_dirs(out)[0]
        (self.dump,) = dump_files(self.dir)

    def analyze(self, *args, rc):
        before = [m for _, m in log_messages(self.dir)]
        a = run_cli(["--plugin-path", BAD_PLUGINS, *args], cwd=self.tmp_path, check_rc=rc)
        return a, [m for _, m in log_messages(self.dir)][len(before):]


# A live run's log starts with what the console said before it opened (the
# run as root, the plugin folder's refusals); --analyze appends to the log of
# the run that recorded its dump, and carries the same lines there, and the
# errors that stop it before a dump is read.

def test_analyze_puts_the_warnings_said_before_reading_the_dump_in_the_runs_log(tmp_path):
    run = RecordedRun(tmp_path)
    a, added = run.analyze("-v", "--analyze=leaks", f"--input={run.dump}", rc=0)  # -v: the refusals are warned of
    warned = said_in_log_words(a.stderr)
    assert f"[warning] plugin {WRONG_ABI.replace(': wrong', ' refused: wrong', 1)}" in warned, a.stderr
    assert len(set(warned)) == len(warned), a.stderr  # each said once on the console
    assert added == warned + [f"[info] {l}" for l in a.stdout.splitlines()], added


def test_analyze_of_only_a_refused_analyzer_says_so_in_the_runs_log(tmp_path):
    run = RecordedRun(tmp_path)
    a, added = run.analyze("--analyze=wrong_abi", f"--input={run.dump}", rc=2)
    refused = f"plugin 'wrong_abi' (selected by --analyze) cannot be loaded: {WRONG_ABI}; no analyzer is left to run"
    assert a.stderr.splitlines() == [f"msmemscope: error: {refused}"], a.stderr
    assert added == [f"[error] {refused}"], added


@pytest.mark.parametrize("pattern", ["dump", "process folder"])
def test_analyze_of_only_a_refused_analyzer_with_an_input_pattern_says_so_in_the_runs_log(tmp_path, pattern):
    # The refusal stops before validate() expands --input's pattern: the
    # pattern, as typed, named no run and the log had nothing. It names the
    # run it matches (exactly one, as --analyze takes).
    run = RecordedRun(tmp_path)
    given = (f"{run.dump.parent}/memscope_dump_*.csv" if pattern == "dump"
             else f"{run.dir.parent}/{run.dir.name[:-4]}*")
    assert len(glob.glob(given)) == 1, given
    a, added = run.analyze("--analyze=wrong_abi", f"--input={given}", rc=2)
    refused = f"plugin 'wrong_abi' (selected by --analyze) cannot be loaded: {WRONG_ABI}; no analyzer is left to run"
    assert a.stderr.splitlines() == [f"msmemscope: error: {refused}"], a.stderr
    assert added == [f"[error] {refused}"], added


def test_analyze_of_a_file_in_the_dump_folder_that_is_no_dump_says_so_in_the_runs_log(tmp_path):
    run = RecordedRun(tmp_path)
    junk = run.dump.parent / "notes.txt"
    junk.write_text("not a dump\n")
    a, added = run.analyze("-v", "--analyze=leaks", f"--input={junk}", rc=2)
    warned = said_in_log_words(a.stderr)
    assert warned[-1].startswith(f"[error] --input: {junk}"), a.stderr
    assert len(warned) > 1 and added == warned, added


def test_analyze_of_a_run_folder_without_its_dump_says_so_in_its_log(tmp_path):
    run = RecordedRun(tmp_path)
    run.dump.unlink()
    a, added = run.analyze("-v", "--analyze=leaks", f"--input={run.dir}", rc=2)
    warned = said_in_log_words(a.stderr)
    assert warned[-1] == f"[error] --input: {run.dir}: no memscope_dump_*.csv or .db file in this folder", a.stderr
    assert added == warned, added
