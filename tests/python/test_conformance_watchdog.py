"""msmemscope-conformance watches the plugin it checks (issue #29 item 7):
a callback that outlasts --time-budget is stopped and named, the tool exits
1 instead of hanging; a plugin whose files and stdout/stderr pass
--output-limit-mib is stopped; what a plugin prints never lands between the
report's lines. Fixtures: tests/fixtures/bad_plugins (hang_in_event,
hang_in_finish, chatty) and tests/conformance/fixtures
(writes_unbounded_file, floods_stdout)."""
import subprocess

from conftest import BUILD

CONFORMANCE = BUILD / "bin" / "msmemscope-conformance"
BAD = BUILD / "tests" / "lib" / "bad_plugins"
OUTPUT_FIXTURES = BUILD / "tests" / "lib" / "conformance_output_fixtures"


def bad(name):
    return BAD / f"libmsmemscope_plugin_{name}.so"


def out_fixture(name):
    return OUTPUT_FIXTURES / f"libmsmemscope_plugin_{name}.so"


def run(*args, timeout=300):
    assert CONFORMANCE.exists(), f"build first: {CONFORMANCE}"
    return subprocess.run([str(CONFORMANCE)] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def report(stdout, plugin):
    """The report lines of one plugin (indented), up to its verdict."""
    lines = stdout.splitlines()
    start = lines.index(str(plugin))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].endswith(" " + str(plugin)))
    return lines[start + 1:end], lines[end].split()[0]


def test_a_hanging_callback_is_stopped_at_its_time_budget():
    p = run("--pairs=2000", "--time-budget=1", bad("hang_in_event"), bad("hang_in_finish"), bad("chatty"))
    assert p.returncode == 1, p.stdout + p.stderr
    lines, verdict = report(p.stdout, bad("hang_in_event"))
    assert verdict == "FAIL"
    assert lines[-1] == ("  FAIL  lifecycle (on_event SYSTEM/ACL_INIT (id 1)): exceeded its time budget in on_event "
                         "(1 s, --time-budget); stopped"), lines
    lines, verdict = report(p.stdout, bad("hang_in_finish"))
    assert verdict == "FAIL"
    assert any(line.endswith("exceeded its time budget in finish (1 s, --time-budget); stopped") for line in lines), lines
    # The next plugin is still checked, and passes.
    assert report(p.stdout, bad("chatty"))[1] == "PASS"
    assert p.stdout.splitlines()[-3] == "3 plugin(s): 1 passed, 2 failed"


def test_what_a_plugin_prints_stays_out_of_the_report():
    p = run("--pairs=2000", bad("chatty"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "chatty:" not in p.stdout and "chatty:" not in p.stderr
    lines, verdict = report(p.stdout, bad("chatty"))
    assert verdict == "PASS"
    assert all(line.startswith(("  ok    ", "  note  ")) for line in lines), lines
    assert any(line.startswith("  note  the plugin printed ") and "bytes on stdout/stderr" in line for line in lines)


def test_unbounded_output_is_flagged_and_stopped():
    p = run("--pairs=2000", "--output-limit-mib=8", out_fixture("writes_unbounded_file"), out_fixture("floods_stdout"))
    assert p.returncode == 1, p.stdout + p.stderr
    for name in ("writes_unbounded_file", "floods_stdout"):
        lines, verdict = report(p.stdout, out_fixture(name))
        assert verdict == "FAIL"
        fails = [line for line in lines if line.startswith("  FAIL  ")]
        assert len(fails) == 1, lines
        assert ("unbounded output: its files and stdout/stderr passed 8 MiB + 1024 bytes per callback "
                "(--output-limit-mib, --output-per-call; ") in fails[0], fails
        assert fails[0].endswith(" in on_event; stopped"), fails
    assert "floods_stdout: yyy" not in p.stdout


def test_the_time_budget_and_output_limit_options_are_checked():
    p = run("--time-budget=soon", bad("chatty"))
    assert p.returncode == 2
    assert p.stderr.splitlines()[0] == "msmemscope-conformance: error: --time-budget: expected a non-negative integer"
    p = run("--output-limit-mib=-1", bad("chatty"))
    assert p.returncode == 2
    assert p.stderr.splitlines()[0] == ("msmemscope-conformance: error: --output-limit-mib: expected a non-negative "
                                        "integer")


def test_output_that_grows_with_the_events_is_not_flagged():
    # Positive control: the CSV sink writes a row per event, several MiB for
    # 20,000 pairs -- past a 1 MiB base, within 1024 bytes per callback.
    csv = BUILD / "lib" / "msmemscope" / "plugins" / "libmsmemscope_plugin_csv.so"
    p = run("--pairs=20000", "--output-limit-mib=1", "--keep", csv)
    assert p.returncode == 0, p.stdout + p.stderr
    lines, verdict = report(p.stdout, csv)
    assert verdict == "PASS" and not [line for line in lines if "unbounded output" in line], lines
    kept = next(line.split("output kept in ", 1)[1] for line in lines if "output kept in " in line)
    import shutil
    from pathlib import Path
    written = sum(f.stat().st_size for f in Path(kept).rglob("*") if f.is_file())
    shutil.rmtree(kept)
    assert written > 1024 * 1024, written
