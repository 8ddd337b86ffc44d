"""Plugin isolation (issue #29 item 7): what a plugin prints -- printf,
write(1), std::cerr, fprintf(stderr) -- goes to the process folder's
msmemscope_plugins.log, never into the profiled program's stdout/stderr,
while the host's own messages from the pipeline worker stay on stderr.
Fixtures: tests/fixtures/bad_plugins (chatty, throws_in_event)."""
import re
import sys

from conftest import BUILD, process_dirs

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
LONG = 300000
PROGRAM = [sys.executable, "-c",
           "import sys\n"
           "for i in range(20):\n"
           "    sys.stdout.write('x' * 15000); sys.stdout.flush(); sys.stderr.write('e'); sys.stderr.flush()\n"
           "    bytearray(4096 * (i + 1))\n"
           "sys.stdout.write('\\n'); print('done')"]


def test_plugin_output_goes_to_the_plugin_log_not_the_programs_streams(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free",
             "--analysis=chatty,throws_in_event", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=71)
    # The program's stdout is exactly its own output, then the tool's summary.
    own, sep, summary = p.stdout.partition("msmemscope: pid ")
    assert sep, p.stdout[-2000:]
    assert own == "x" * LONG + "\ndone\n", own[:200] + " ... " + own[-200:]
    assert "chatty" not in p.stdout and "chatty" not in p.stderr
    # The host's own message from the worker is still on stderr, whole; the
    # program's 20 'e's (written without a newline) around it, all there.
    # (Where the message falls among them depends on timing.)
    assert re.search(r"msmemscope: error: plugin 'throws_in_event': failed on event \d+: throws_in_event: on purpose; "
                     r"continuing without it\n", p.stderr), p.stderr
    assert re.sub(r"msmemscope: (warning|error): [^\n]*\n", "", p.stderr) == "e" * 20, p.stderr
    # Everything the plugin printed is in the log, whole lines.
    procdir, = process_dirs(out)
    log = (procdir / "msmemscope_plugins.log").read_text()
    for line in ["chatty: write(1)", "chatty: std::cerr", "chatty: fprintf(stderr)", "chatty: printf event 1"]:
        assert line in log.splitlines(), log[:2000]
    assert re.search(r"^chatty: finish after \d+ events$", log, re.M)
    assert "  files (in" in summary and "msmemscope_plugins.log" in summary


def test_no_plugin_log_when_no_plugin_prints(cli, tmp_path):
    out = tmp_path / "out"
    cli(["--device=cpu", "--events=alloc,free", "--output", str(out), "--", "/bin/ls", "/"], cwd=tmp_path, check_rc=0)
    procdir, = process_dirs(out)
    assert not (procdir / "msmemscope_plugins.log").exists()
    assert (procdir / "config.json").is_file()
