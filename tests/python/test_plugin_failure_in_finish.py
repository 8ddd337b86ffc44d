"""A plugin failing in a sink's finish() (issue: "found and not fixed" of
plugin isolation) came after the host had told the sinks of the run's
failures, so it was only on the console. Now it reaches every view that can
still take it: the sinks that finish after it (the HTML banner, the db's
plugin_failure rows), the run's log, and summary.json, which the host writes
after every sink; the console and the log say that the failed sink's own
output is incomplete and why, since that output cannot say it.
Fixture: tests/fixtures/bad_plugins/throws_in_finish.cpp."""
import json
import re

import pytest

from conftest import process_dirs
from sinks_common import only, render
from test_html_plugin_failure import FIXTURES, banner, db_failures, page_data, page_of

PROGRAM = ["/bin/ls", "/"]
WANT = {"plugin": "throws_in_finish", "kind": "sink", "what": "finish failed: throws_in_finish: on purpose"}
SAID = ("plugin 'throws_in_finish': finish failed: throws_in_finish: on purpose; its output is incomplete and does "
        "not say so")


def run(cli, tmp_path, sinks, rc, analysis="leaks", env=None):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", f"--analysis={analysis}",
             f"--sinks={sinks}", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=rc, env=env)
    return p, only(process_dirs(out))


def summary_json(d):
    return json.loads((d / "summary.json").read_text())


def log_text(d):
    return only((d / "msmemscope_logs").glob("*.log")).read_text()


@pytest.mark.parametrize("threads", ["pipeline", "own"])
def test_a_sink_failing_in_finish_is_named_by_the_sinks_that_finish_after_it(cli, tmp_path, threads):
    # Sinks finish one after another, in --sinks order, whether on the
    # pipeline's thread (MSMEMSCOPE_SINK_THREADS=0) or each on a thread of
    # its own: html and db finish after throws_in_finish failed and name it.
    # On threads of their own the finishes went side by side, so html and
    # db, finishing at the same time as throws_in_finish, often did not.
    env = {"MSMEMSCOPE_SINK_THREADS": "0"} if threads == "pipeline" else {}
    p, d = run(cli, tmp_path, "throws_in_finish,html,db", rc=70, env=env)
    if threads == "own":
        assert "sinks: csv, throws_in_finish, html, db each on a thread of its own" in log_text(d)
    assert "msmemscope: error: " + SAID in p.stderr.splitlines(), p.stderr
    page = page_of(d)
    assert page_data(page)["plugin_failures"] == [WANT]
    assert banner(render(page, tmp_path)) == [
        "Plugin 'throws_in_finish' (sink) failed: finish failed: throws_in_finish: on purpose. "
        "This page is without what it would have added."]
    assert db_failures(d) == [WANT]


def test_the_failed_sinks_own_output_is_named_incomplete_on_the_console_and_in_the_log(cli, tmp_path):
    # The console, the log and summary.json name the failure, whichever
    # sinks come after it.
    p, d = run(cli, tmp_path, "csv,throws_in_finish,html", rc=70)
    errors = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:") and "throws_in_finish" in l]
    pid = re.search(r"^msmemscope: pid (\d+) ", p.stdout, re.M)[1]
    assert errors == ["msmemscope: error: " + SAID, f"msmemscope: error: pid {pid}: output incomplete: " + SAID], \
        p.stderr
    log = log_text(d)
    assert f"[error] {SAID}" in log, log
    assert f"output incomplete: {SAID}" in log, log
    s = summary_json(d)
    assert s["plugin_failures"] == [WANT]
    assert s["complete"] is False and s["incomplete"] == [SAID]
    # config.json's "dropped" gives the reason without the console's tail
    assert json.loads((d / "config.json").read_text())["dropped"] == {
        "throws_in_finish": "finish failed: throws_in_finish: on purpose"}


def test_summary_json_names_an_analyzers_failure_and_none_in_a_clean_run(cli, tmp_path):
    _, d = run(cli, tmp_path, "csv", rc=71, analysis="leaks,throws_in_event")
    assert summary_json(d)["plugin_failures"] == [
        {"plugin": "throws_in_event", "kind": "analyzer", "what": "failed on event 1: throws_in_event: on purpose"}]
    clean = tmp_path / "clean"
    clean.mkdir()
    _, d = run(cli, clean, "csv", rc=0)
    assert summary_json(d)["plugin_failures"] == []


def test_a_sink_crashing_in_finish_is_named_by_the_rerun_outputs_and_summary_json(cli, tmp_path):
    # A crash is re-run without the sink: every other view is told from the start.
    p, d = run(cli, tmp_path, "segv_in_finish,html,db", rc=70)
    assert ("msmemscope: error: plugin 'segv_in_finish' crashed (SIGSEGV) in finish; re-running the outputs without "
            "it") in p.stderr.splitlines(), p.stderr
    want = {"plugin": "segv_in_finish", "kind": "sink", "what": "crashed (SIGSEGV) in finish"}
    assert page_data(page_of(d))["plugin_failures"] == [want]
    assert db_failures(d) == [want]
    assert summary_json(d)["plugin_failures"] == [want]
