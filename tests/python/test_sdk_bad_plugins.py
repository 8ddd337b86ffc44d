"""The host against misbehaving plugins (tests/fixtures/bad_plugins), through
the CLI: each bad plugin is refused with its precise reason, and an analyzer
that throws on an event is dropped while the run completes. Also the
conformance program's verdicts on plugins that break its rules
(tests/conformance/fixtures)."""
import os
import re
import subprocess
from pathlib import Path

from conftest import BUILD, dump_files, log_messages, process_dirs, read_dump

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
CONFORMANCE_FIXTURES = BUILD / "tests" / "lib" / "conformance_fixtures"
BUILTIN = BUILD / "lib" / "msmemscope" / "plugins"
CONFORMANCE = BUILD / "bin" / "msmemscope-conformance"

# A short-lived program that allocates: /bin/ls (its heap goes through malloc).
PROGRAM = ["/bin/ls", "/"]


def fixture(name):
    return f"{FIXTURES}/libmsmemscope_plugin_{name}.so"


def test_list_plugins_names_each_refusal(cli, tmp_path):
    assert FIXTURES.is_dir(), f"build the fixtures first: {FIXTURES}"
    p = cli(["--plugin-path", str(FIXTURES), "--list-plugins"], cwd=tmp_path, check_rc=0)
    refused = [line for line in p.stdout.splitlines() if line.startswith("refused: ")]
    csv_path = os.path.realpath(BUILTIN / "libmsmemscope_plugin_csv.so")
    # The built-in csv may be printed through the binary's real path.
    dup = [line for line in refused if "duplicate_csv" in line]
    assert len(dup) == 1, p.stdout
    m = re.fullmatch(r"refused: (.*): duplicate type name 'csv' \(already provided by (.*)\)", dup[0])
    assert m, dup[0]
    assert m.group(1) == fixture("duplicate_csv")
    assert os.path.realpath(m.group(2)) == csv_path
    expected = [
        f"refused: {fixture('abort_in_load')}: crashed (SIGABRT) while being loaded: "
        "abort_in_load: giving up in a static constructor",
        f"refused: {fixture('bad_name')}: invalid type name 'Bad-Name' "
        "(allowed: [a-z][a-z0-9_]*, at most 64 characters)",
        f"refused: {fixture('bad_schema')}: plugin 'bad_schema': INT option 'depth' has min > max (10 > 1)",
        f"refused: {fixture('c_descriptor_variable')}: entry symbol 'msmemscope_plugin' is a variable of 144 "
        "bytes, not a pointer to the entry function; export a function `const msms_plugin_descriptor* "
        "msmemscope_plugin(void)` (C) or use MSMEMSCOPE_PLUGIN(Class) (C++)",
        f"refused: {fixture('missing_dep')}: cannot load: libmsms_fixture_gone.so: cannot open shared object "
        "file: No such file or directory",
        f"refused: {fixture('no_entry')}: no entry symbol 'msmemscope_plugin'",
        f"refused: {fixture('null_descriptor')}: the entry returned no descriptor",
        f"refused: {fixture('wrong_abi')}: wrong ABI version: got 2.0, supported 1.4",
    ]
    others = [line for line in refused if "duplicate_csv" not in line and "asan_built" not in line]
    assert others == expected
    if Path(fixture("asan_built")).exists():
        asan = [line for line in refused if "asan_built" in line]
        assert len(asan) == 1 and re.fullmatch(
            rf"refused: {re.escape(fixture('asan_built'))}: ended the process \(exit status 1\) while being "
            r"loaded: ==\d+==ASan runtime does not come first in initial library list.*", asan[0]), refused
    # The ones that only misbehave later load like any analyzer.
    names = {line.split()[0]: line.split() for line in p.stdout.splitlines()[1:] if not line.startswith("refused")}
    assert names["throws_in_create"][1] == "analyzer"
    assert names["throws_in_event"][1] == "analyzer"
    assert names["throws_in_event"][3] == fixture("throws_in_event")
    # Either form of the entry symbol: a C plugin exporting a function loads.
    assert names["c_function_entry"][1] == "analyzer"
    # The built-in csv is still the one in use.
    assert os.path.realpath(names["csv"][3]) == csv_path


def test_refusals_in_a_plugin_path_folder_are_not_warned_on_every_run(cli, tmp_path):
    # Issue 29: unselected, a refused plugin of a --plugin-path folder is
    # named by --list-plugins (above), not on every run ...
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", "--analysis=",
             "--output", str(tmp_path / "out"), "--"] + PROGRAM, cwd=tmp_path, check_rc=0)
    assert not [l for l in p.stderr.splitlines() if l.startswith("msmemscope: warning: plugin ")], p.stderr
    # ... with --verbose it is ...
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", "--analysis=", "-v",
             "--output", str(tmp_path / "out2"), "--"] + PROGRAM, cwd=tmp_path, check_rc=0)
    assert (f"msmemscope: warning: plugin {fixture('wrong_abi')} refused: "
            "wrong ABI version: got 2.0, supported 1.4") in p.stderr.splitlines()
    assert (f"msmemscope: warning: plugin {fixture('no_entry')} refused: "
            "no entry symbol 'msmemscope_plugin'") in p.stderr.splitlines()
    # ... and selected by name, it is an error that drops it (71), said once.
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", "--analysis=no_entry",
             "--output", str(tmp_path / "out3"), "--"] + PROGRAM, cwd=tmp_path, check_rc=71)
    assert [l for l in p.stderr.splitlines() if "plugin " in l and ("refused" in l or "no_entry" in l)] == [
        f"msmemscope: error: plugin 'no_entry' (selected by --analysis) cannot be loaded: {fixture('no_entry')}: "
        "no entry symbol 'msmemscope_plugin'; running without it"], p.stderr


def test_offline_analysis_names_a_refused_plugin_of_a_plugin_path_folder(cli, tmp_path):
    """--analyze with a plugin refused in a --plugin-path folder: with
    another analyzer, the analysis goes on without it (71); alone, it stops
    there (2) with that error only (it went on to "--analyze: empty value
    (allowed: analyzer names)", a value the user never gave)."""
    dump = tmp_path / "d.csv"
    dump.write_text("ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,"
                    "Call Stack(Python),Call Stack(C)\n"
                    '1,MALLOC,PTA,N/A,1000,7,7,0,0x1000,"{allocation_id:1,addr:0x1000,size:512}",,\n')
    why = f"{fixture('wrong_abi')}: wrong ABI version: got 2.0, supported 1.4"

    def errors(p):
        return [line for line in p.stderr.splitlines() if line.startswith("msmemscope: error: ")]

    p = cli(["--plugin-path", str(FIXTURES), "--analyze=leaks,wrong_abi", f"--input={dump}",
             f"--output={tmp_path / 'o1'}"], cwd=tmp_path, check_rc=71)
    assert errors(p) == [f"msmemscope: error: plugin 'wrong_abi' (selected by --analyze) cannot be loaded: {why}; "
                         "running without it"], p.stderr
    assert f"msmemscope: analysed {dump} (1 rows) with leaks" in p.stdout, p.stdout
    p = cli(["--plugin-path", str(FIXTURES), "--analyze=wrong_abi", f"--input={dump}", f"--output={tmp_path / 'o2'}"],
            cwd=tmp_path, check_rc=2)
    assert errors(p) == [f"msmemscope: error: plugin 'wrong_abi' (selected by --analyze) cannot be loaded: {why}; "
                         "no analyzer is left to run"], p.stderr
    # unselected, the folder's refusals are said with --verbose only
    assert "refused" not in p.stderr, p.stderr
    p = cli(["--plugin-path", str(FIXTURES), "--analyze=leaks", f"--input={dump}", f"--output={tmp_path / 'o3'}",
             "-v"], cwd=tmp_path, check_rc=0)
    assert f"msmemscope: warning: plugin {fixture('wrong_abi')} refused: wrong ABI version: got 2.0, supported 1.4" in \
        p.stderr.splitlines(), p.stderr


def test_analyzer_throwing_on_an_event_is_dropped_and_the_run_completes(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free",
             "--analysis=throws_in_event", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=71)
    # The exception's text crosses the boundary (ABI 1.1 last_error).
    m = re.search(r"^msmemscope: error: plugin 'throws_in_event': failed on event (\d+): throws_in_event: on "
                  r"purpose; continuing without it$", p.stderr, re.M)
    assert m, p.stderr
    assert len(re.findall(r"plugin 'throws_in_event': failed", p.stderr)) == 1, p.stderr
    dirs = process_dirs(out)
    assert dirs, f"no output in {out}"
    files = dump_files(dirs[0])
    assert len(files) == 1
    rows = read_dump(files[0])
    assert any(r["Event"] == "MALLOC" for r in rows)
    # The event it failed on is the first it saw, and still reached the sink.
    assert int(m.group(1)) == min(int(r["ID"]) for r in rows)


def test_analyzer_out_of_memory_is_dropped_in_a_run_and_ends_an_offline_analysis(cli, tmp_path):
    # std::bad_alloc at the boundary is MSMS_ERR_OUT_OF_MEMORY. A run drops the
    # analyzer and says why (71); --analyze shares the plugin's address space
    # and is out of memory itself: one line, 70, nothing written back (it used
    # to print the drop twice and exit 1, or to say out of memory, depending
    # on which allocation failed first).
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free",
             "--analysis=leaks,bad_alloc_in_event", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=71)
    lines = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert len(lines) == 1 and re.fullmatch(r"msmemscope: error: plugin 'bad_alloc_in_event': failed on event \d+: "
                                            r"std::bad_alloc \(out of memory\); continuing without it", lines[0]), p.stderr
    procdir = process_dirs(out)[0]
    csv_file = dump_files(procdir)[0]
    before = csv_file.read_bytes()
    logged_before = len(log_messages(procdir))
    assert len(read_dump(csv_file)) > 100
    p = cli(["--plugin-path", str(FIXTURES), "--analyze=leaks,bad_alloc_in_event", f"--input={csv_file}",
             f"--output={tmp_path / 'analysed'}"], cwd=tmp_path, check_rc=70)
    lines = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert len(lines) == 1 and re.fullmatch(
        rf"msmemscope: error: --analyze: {re.escape(str(csv_file))}: out of memory \(an allocation failed after \d+ "
        r"MiB in use; --offline-memory sets the budget\); nothing was written back", lines[0]), p.stderr
    # As the analysis's other errors, the line is in the log of the run that
    # recorded the dump (a reader of the run's log learns why nothing was
    # written back), once.
    added = [m for _, m in log_messages(procdir)[logged_before:]]
    said = "[error] " + lines[0][len("msmemscope: error: "):]
    assert [m for m in added if m.startswith("[error]")] == [said], added
    assert csv_file.read_bytes() == before
    # A control: without it the same analysis ends well.
    cli(["--analyze=leaks", f"--input={csv_file}", f"--output={tmp_path / 'analysed2'}"], cwd=tmp_path, check_rc=0)


def test_analyzer_throwing_in_create_is_left_out(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free",
             "--analysis=throws_in_create", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=71)
    assert ("plugin 'throws_in_create': create failed: throws_in_create: constructor failed on purpose; "
            "continuing without it") in p.stderr, p.stderr
    assert dump_files(process_dirs(out)[0])


def run_conformance(*args):
    assert CONFORMANCE.exists(), f"build first: {CONFORMANCE}"
    return subprocess.run([str(CONFORMANCE)] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=600)


def verdicts(stdout):
    """{plugin path: [its '  ok/FAIL/note' lines]} and {path: PASS|FAIL}."""
    lines, result, current = {}, {}, None
    for line in stdout.splitlines():
        if line.startswith("PASS ") or line.startswith("FAIL "):
            result[line[5:]] = line[:4]
        elif line.startswith("  "):
            lines[current].append(line.strip())
        elif not re.match(r"\d+ plugin\(s\)|failed: ", line):
            current = line
            lines[current] = []
    return lines, result


def test_conformance_rejects_the_bad_fixtures_with_precise_reasons():
    p = run_conformance("--pairs=20000", *[fixture(n) for n in (
        "bad_name", "duplicate_csv", "no_entry", "null_descriptor", "throws_in_create", "throws_in_event",
        "wrong_abi")])
    assert p.returncode == 1, p.stdout + p.stderr
    lines, result = verdicts(p.stdout)
    assert result[fixture("wrong_abi")] == "FAIL"
    assert lines[fixture("wrong_abi")] == ["FAIL  load: wrong ABI version: got 2.0, supported 1.4"]
    assert lines[fixture("no_entry")] == ["FAIL  load: no entry symbol 'msmemscope_plugin'"]
    assert lines[fixture("null_descriptor")] == ["FAIL  load: the entry returned no descriptor"]
    assert lines[fixture("bad_name")] == [
        "FAIL  load: invalid type name 'Bad-Name' (allowed: [a-z][a-z0-9_]*, at most 64 characters)"]
    exc = "5 (MSMS_ERR_EXCEPTION: a C++ exception was caught at the boundary)"
    assert (f"FAIL  create/destroy: create() returned status {exc}: throws_in_create: constructor failed on purpose"
            in lines[fixture("throws_in_create")])
    # The plugin's own error text (descriptor.last_error) next to the status.
    assert (f"FAIL  lifecycle: on_event() returned status {exc} for SYSTEM/ACL_INIT (id 1): "
            "throws_in_event: on purpose (the host would drop the plugin)" in lines[fixture("throws_in_event")])
    # Alone, a sink named csv is a well-behaved plugin with a misleading file name.
    assert result[fixture("duplicate_csv")] == "PASS"
    assert ("note  file name libmsmemscope_plugin_duplicate_csv.so does not follow the rule "
            "libmsmemscope_plugin_<type name>.so (libmsmemscope_plugin_csv.so)") in lines[fixture("duplicate_csv")]
    assert p.stdout.splitlines()[-7] == "7 plugin(s): 1 passed, 6 failed"


def test_conformance_catches_crash_second_finish_history_and_bad_schema():
    p = run_conformance("--pairs=300000", CONFORMANCE_FIXTURES)
    assert p.returncode == 1, p.stdout + p.stderr
    lines, result = verdicts(p.stdout)

    def of(name):
        return lines[f"{CONFORMANCE_FIXTURES}/libmsmemscope_plugin_{name}.so"]

    assert of("crashes_in_event")[-1] == (
        "FAIL  lifecycle (on_event MALLOC/HAL (id 6)): crashed with signal 11 (Segmentation fault)")
    assert ("FAIL  finish twice: the second finish() called the host again (1 emit/report/finding/annotate calls)"
            in of("finish_not_idempotent"))
    bounded = [line for line in of("keeps_history") if "bounded state" in line]
    assert len(bounded) == 1 and bounded[0].startswith("FAIL  bounded state: 300000 pairs, resident set grew by ")
    assert "ok    options: bad options refused: 6 bad value(s)" in of("keeps_history")
    # The host's own load checks (shared, not a second copy) refuse the schema.
    assert of("bad_option_schema") == [
        "FAIL  load: plugin 'bad_option_schema': ENUM option 'style' lists no allowed values"]
    assert all(v == "FAIL" for v in result.values()), result


def test_plugin_path_is_searched_before_the_profiles_search_paths(cli, tmp_path):
    """sdk/README "Search order": each --plugin-path, then the YAML's
    plugins.search_paths, wherever --config stands: the same type name in
    both is the command line's, the profile's is refused as a duplicate."""
    import shutil
    plugin = BUILD / "tests" / "lib" / "custom_pool" / "libmsmemscope_plugin_custom_pool.so"
    for folder in ("from_cli", "from_yaml"):
        (tmp_path / folder).mkdir()
        shutil.copy(plugin, tmp_path / folder)
    (tmp_path / "profile.yaml").write_text("plugins:\n  search_paths: [from_yaml]\n")
    for args in (["--config=profile.yaml", "--plugin-path=from_cli"],
                 ["--plugin-path=from_cli", "--config=profile.yaml"]):
        p = cli([*args, "--list-plugins"], cwd=tmp_path, check_rc=0)
        taken = [line.split() for line in p.stdout.splitlines() if line.startswith("custom_pool ")]
        assert len(taken) == 1 and taken[0][-1].endswith("from_cli/libmsmemscope_plugin_custom_pool.so"), p.stdout
        assert any(line.startswith("refused: ") and "from_yaml/libmsmemscope_plugin_custom_pool.so: duplicate type "
                   "name 'custom_pool'" in line for line in p.stdout.splitlines()), p.stdout
