"""A plugin that crashes costs nothing but itself (issue #17, DESIGN §8): the
host runs the pipeline in a supervised worker; when a plugin dies, it names
the plugin and the callback, re-runs the outputs from the capture without it,
and ends with exit status 71. Also plugins that crash or cannot be loaded
while being discovered, the two forms of the entry symbol, and error text
from plugin callbacks. Fixtures: tests/fixtures/bad_plugins."""
import re
from pathlib import Path

from conftest import BUILD, dump_files, log_messages, process_dirs, read_dump

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
PROGRAM = ["/bin/ls", "/"]


def fixture(name):
    return f"{FIXTURES}/libmsmemscope_plugin_{name}.so"


def run(cli, tmp_path, *opts, rc):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", "--output", str(out),
             *opts, "--"] + PROGRAM, cwd=tmp_path, check_rc=rc)
    return p, out


def assert_complete(out):
    """One process folder with a complete CSV; nothing empty or hidden left."""
    dirs = process_dirs(out)
    assert len(dirs) == 1, list(Path(out).iterdir())
    files = dump_files(dirs[0])
    assert len(files) == 1
    rows = read_dump(files[0])
    assert any(r["Event"] == "MALLOC" for r in rows) and any(r["Event"] == "FREE" for r in rows)
    ids = [int(r["ID"]) for r in rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # (a log file without warnings is empty by design)
    empty = [str(f) for f in Path(out).rglob("*") if f.is_file() and f.stat().st_size == 0 and f.suffix != ".log"]
    assert empty == []
    hidden = [str(f) for f in Path(out).iterdir() if f.name.startswith(".msmemscope_session_")]
    assert hidden == []
    return dirs[0], rows


def crash_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("msmemscope: error: plugin '") and "crashed" in line]


def test_segfault_in_on_event_costs_only_the_plugin(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=leaks,segv_in_event", rc=71)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the outputs without it"]
    procdir, rows = assert_complete(out)
    # The program's own status stays visible; the summary names the drop.
    assert re.search(r"^msmemscope: pid \d+ \(/bin/ls /\) exited with code 0$", p.stdout, re.M), p.stdout
    assert ("  error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; the outputs were re-run without it"
            in p.stdout.splitlines()), p.stdout
    log = next((procdir / "msmemscope_logs").glob("*.log")).read_text()
    assert "plugin 'segv_in_event' crashed (SIGSEGV) in on_event" in log


def test_the_rerun_writes_what_a_run_without_the_plugin_writes(cli, tmp_path):
    # Same capture both ways: replay a saved capture with and without the crasher.
    first = tmp_path / "first"
    cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--save-capture=true", "--output", str(first),
         "--"] + PROGRAM, cwd=tmp_path, check_rc=0)
    capture = next(process_dirs(first)[0].glob("*.msmcap"))
    plain = tmp_path / "plain"
    cli(["--replay", str(capture), "--device=cpu", "--analysis=", "--output", str(plain)], cwd=tmp_path, check_rc=0)
    crashed = tmp_path / "crashed"
    p = cli(["--plugin-path", str(FIXTURES), "--replay", str(capture), "--device=cpu",
             "--analysis=segv_in_event", "--output", str(crashed)], cwd=tmp_path, check_rc=71)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the outputs without it"]
    _, rows = assert_complete(crashed)
    _, want = assert_complete(plain)
    assert [r["ID"] + r["Event"] + r["Ptr"] for r in rows] == [r["ID"] + r["Event"] + r["Ptr"] for r in want]


def test_segfault_in_create(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=segv_in_create", rc=71)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_create' crashed (SIGSEGV) in create; re-running the outputs without it"]
    assert_complete(out)


def test_sink_segfault_in_finish(cli, tmp_path):
    # A sink that crashed lost its own files: the output is incomplete (70).
    p, out = run(cli, tmp_path, "--analysis=", "--sinks=segv_in_finish", rc=70)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_finish' crashed (SIGSEGV) in finish; re-running the outputs without it"]
    assert_complete(out)


def test_sink_segfault_on_its_own_thread_names_the_sink(cli, tmp_path):
    # Sinks run on threads of their own beside the analyzers (issue #30): the
    # thread that faulted is the one named, not the analyzer the pipeline's
    # thread may be in at that moment.
    p, out = run(cli, tmp_path, "--analysis=leaks,decompose", "--sinks=csv,segv_in_sink_event", rc=70)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_sink_event' crashed (SIGSEGV) in on_event; re-running the outputs without "
        "it"]
    assert_complete(out)


def test_a_sink_stuck_in_on_event_is_killed_at_the_budget(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=leaks", "--sinks=csv,hang_in_sink_event", "--plugin-time-budget=1", rc=70)
    assert [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error: plugin")] == [
        "msmemscope: error: plugin 'hang_in_sink_event' exceeded its time budget (1 s, --plugin-time-budget) in "
        "on_event; re-running the outputs without it"], p.stderr
    assert_complete(out)


def test_two_crashing_plugins_are_both_dropped(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=segv_in_event", "--sinks=segv_in_finish", rc=70)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the outputs without it",
        "msmemscope: error: plugin 'segv_in_finish' crashed (SIGSEGV) in finish; re-running the outputs without it"]
    assert_complete(out)


def test_a_run_without_misbehaving_plugins_keeps_the_programs_status(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=c_function_entry", rc=0)
    assert crash_lines(p.stderr) == []
    assert_complete(out)
    # The C plugin exporting its entry as a function ran and reported.
    assert re.search(r"^c_function_entry: \d+ events$", p.stdout, re.M), p.stdout


def test_plugin_aborting_while_loaded_is_refused_and_a_selection_of_it_dropped(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=abort_in_load", rc=71)
    assert (f"msmemscope: error: plugin 'abort_in_load' (selected by --analysis) cannot be loaded: "
            f"{fixture('abort_in_load')}: crashed (SIGABRT) while being loaded: abort_in_load: giving up in a "
            "static constructor; running without it") in p.stderr.splitlines(), p.stderr
    assert_complete(out)


def test_plugin_missing_a_library_is_named_with_the_loaders_message(cli, tmp_path):
    p, _ = run(cli, tmp_path, "--analysis=", "--verbose", rc=0)  # unselected: said with --verbose (issue 29)
    assert (f"msmemscope: warning: plugin {fixture('missing_dep')} refused: cannot load: libmsms_fixture_gone.so: "
            "cannot open shared object file: No such file or directory") in p.stderr.splitlines()
    assert "Bad file descriptor" not in p.stderr


def test_refusals_and_dropped_selections_are_in_the_log_in_the_consoles_order(cli, tmp_path):
    """Said while the plugins were found, before any log existed: each
    process's log repeats them first, in order, in the console's words."""
    p, out = run(cli, tmp_path, "--analysis=abort_in_load", "--verbose", rc=71)
    prefixes = {"msmemscope: warning: ": "[warning] ", "msmemscope: error: ": "[error] "}
    said = [prefixes[m.group(1)] + m.group(2) for m in
            re.finditer(r"^(msmemscope: (?:warning|error): )(plugin .*)$", p.stderr, re.M)]
    missing = (f"[warning] plugin {fixture('missing_dep')} refused: cannot load: libmsms_fixture_gone.so: cannot "
               "open shared object file: No such file or directory")
    dropped = (f"[error] plugin 'abort_in_load' (selected by --analysis) cannot be loaded: {fixture('abort_in_load')}: "
               "crashed (SIGABRT) while being loaded: abort_in_load: giving up in a static constructor; running "
               "without it")
    assert missing in said and dropped in said, p.stderr
    assert len(set(said)) == len(said), p.stderr  # each said once on the console
    log = [m for _, m in log_messages(process_dirs(out)[0])]
    assert log[:len(said)] == said, log


def test_old_minor_plugin_loads_and_fails_without_text(cli, tmp_path):
    p, out = run(cli, tmp_path, "--analysis=old_minor", rc=71)
    assert re.search(r"^msmemscope: error: plugin 'old_minor': failed on event \d+; continuing without it$",
                     p.stderr, re.M), p.stderr
    assert_complete(out)


def test_list_plugins_verbose_and_describe(cli, tmp_path):
    p = cli(["--list-plugins", "--verbose"], cwd=tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("oom "))
    opts = []
    for line in lines[i + 1:]:
        if not line.startswith("    "):
            break
        opts.append(line.strip())
    assert opts, p.stdout
    assert all(re.fullmatch(r"[A-Za-z][\w-]* \((string|int|bool|enum|list), .*", o) for o in opts), opts
    d = cli(["--describe-plugin=oom"], cwd=tmp_path, check_rc=0)
    dl = d.stdout.splitlines()
    assert re.fullmatch(r"oom: analyzer \S+, ABI 1\.\d+", dl[0]), d.stdout
    assert dl[1].startswith("  path: ") and dl[1].endswith("libmsmemscope_plugin_oom.so")
    assert [x.strip() for x in dl if x.startswith("    ")] == opts
    bad = cli(["--describe-plugin=no_such"], cwd=tmp_path, check_rc=2)
    assert bad.stderr.startswith("msmemscope: error: --describe-plugin: no plugin named 'no_such' (found: ")
    refused = cli(["--plugin-path", str(FIXTURES), "--describe-plugin=bad_schema"], cwd=tmp_path, check_rc=2)
    assert refused.stderr == (f"msmemscope: error: --describe-plugin: plugin 'bad_schema' was refused: "
                              f"{fixture('bad_schema')}: plugin 'bad_schema': INT option 'depth' has min > max "
                              "(10 > 1)\n")


def test_offline_analyze_survives_a_crashing_analyzer(cli, tmp_path):
    """--analyze runs its analyzers supervised too: a plugin that segfaults is
    named, the analysis is re-run without it, the others' results still come
    (the leak report) and the exit status is 71."""
    out = tmp_path / "out"
    cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--output", str(out), "--"] + PROGRAM,
        cwd=tmp_path, check_rc=0)
    csv_file = dump_files(process_dirs(out)[0])[0]
    before = csv_file.read_bytes()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = cli(["--plugin-path", str(FIXTURES), "--analyze=leaks,segv_in_event", f"--input={csv_file}"],
            cwd=tmp_path, env={"TMPDIR": str(tmp)}, check_rc=71)
    assert crash_lines(p.stderr) == [
        "msmemscope: error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the analysis without it"]
    assert f"msmemscope: analysed {csv_file}" in p.stdout, p.stdout
    # leaks reads the file and never writes it back
    assert csv_file.read_bytes() == before
    # the write-back's private folder goes too, although a worker crashed
    assert list(tmp.iterdir()) == []


def test_a_plugin_stuck_in_on_event_is_killed_at_its_time_budget(cli, tmp_path):
    # (issue #29 item 3) the watchdog kills the worker once one call has not
    # ended within --plugin-time-budget; the plugin is treated as crashed
    p, out = run(cli, tmp_path, "--analysis=leaks,hang_in_event", "--plugin-time-budget=1", rc=71)
    assert [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")] == [
        "msmemscope: error: plugin 'hang_in_event' exceeded its time budget (1 s, --plugin-time-budget) in on_event; "
        "re-running the outputs without it"]
    assert_complete(out)
    assert ("  error: plugin 'hang_in_event' exceeded its time budget (1 s, --plugin-time-budget) in on_event; the "
            "outputs were re-run without it" in p.stdout.splitlines()), p.stdout


def test_a_sink_stuck_in_finish_is_killed_at_the_finish_budget(cli, tmp_path):
    # the finish budget is the second number; a sink that lost its output: 70
    p, out = run(cli, tmp_path, "--analysis=", "--sinks=hang_in_finish", "--plugin-time-budget=30,1", rc=70)
    assert [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error: plugin")] == [
        "msmemscope: error: plugin 'hang_in_finish' exceeded its time budget (1 s, --plugin-time-budget) in finish; "
        "re-running the outputs without it"], p.stderr
    assert_complete(out)


def test_time_budget_values(cli, tmp_path):
    for bad in ["x", "1,2,3", "-1", "86401"]:
        p = cli(["--device=cpu", f"--plugin-time-budget={bad}", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
        assert p.stderr.endswith(f"msmemscope: error: --plugin-time-budget: invalid value '{bad}' (allowed: seconds "
                                 "0..86400 for one call, optionally ',' and seconds for finish(), e.g. 60,600)\n"), p.stderr
