"""A plugin that fails costs only itself, and the views say so: the host
tells the sinks at the end of a run which plugins failed or were left out
after a crash (table "plugin_failure"), so that the HTML report does not
present a stopped analysis's silence as its answer ("The leaks analysis
reported no leak."), and the db keeps the failure beside the findings.
Fixtures: tests/fixtures/bad_plugins."""
import html
import json
import re
import sqlite3

from conftest import BUILD, process_dirs
from sinks_common import only, render

FIXTURES = BUILD / "tests" / "lib" / "bad_plugins"
PROGRAM = ["/bin/ls", "/"]


def run(cli, tmp_path, analysis, rc):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free", f"--analysis={analysis}",
             "--sinks=csv,html,db", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=rc)
    return p, only(process_dirs(out))


def page_of(d):
    return only(d.glob("**/report_*.html"))


def page_data(page):
    return json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])


def db_failures(d):
    db = only(d.glob("**/*.db"))
    with sqlite3.connect(db) as c:
        return [json.loads(cols) for (cols,) in c.execute(
            "SELECT cols FROM msms_findings WHERE \"table\" = 'plugin_failure' ORDER BY seq")]


def banner(dom):
    box = re.search(r'<div id="plugin-failures">(.*?)</div>', dom, re.S).group(1)
    return [html.unescape(t) for t in re.findall(r'<p class="failed">(.*?)</p>', box, re.S)]


def test_an_analyzer_that_fails_is_named_at_the_top_of_the_page_and_in_the_db(cli, tmp_path):
    p, d = run(cli, tmp_path, "leaks,throws_in_event", rc=71)
    assert ("msmemscope: error: plugin 'throws_in_event': failed on event 1: throws_in_event: on purpose; "
            "continuing without it") in p.stderr.splitlines()
    want = {"plugin": "throws_in_event", "kind": "analyzer", "what": "failed on event 1: throws_in_event: on purpose"}
    page = page_of(d)
    data = page_data(page)
    assert data["plugin_failures"] == [want]
    assert data["leaks_ran"] is True  # the leaks analysis itself ran to its end
    assert db_failures(d) == [want]
    assert banner(render(page, tmp_path)) == [
        "Plugin 'throws_in_event' (analyzer) failed: failed on event 1: throws_in_event: on purpose. "
        "This page is without what it would have added."]


def test_a_plugin_left_out_after_a_crash_is_named_in_the_outputs_of_the_rerun(cli, tmp_path):
    p, d = run(cli, tmp_path, "leaks,segv_in_event", rc=71)
    assert ("msmemscope: error: plugin 'segv_in_event' crashed (SIGSEGV) in on_event; re-running the outputs "
            "without it") in p.stderr.splitlines()
    want = {"plugin": "segv_in_event", "kind": "analyzer", "what": "crashed (SIGSEGV) in on_event"}
    assert page_data(page_of(d))["plugin_failures"] == [want]
    assert db_failures(d) == [want]


def test_a_clean_run_names_no_failure(cli, tmp_path):
    _, d = run(cli, tmp_path, "leaks", rc=0)
    page = page_of(d)
    assert page_data(page)["plugin_failures"] == []
    assert db_failures(d) == []
    assert banner(render(page, tmp_path)) == []


def test_a_failed_leaks_analysis_is_not_read_as_no_leak(cli, tmp_path):
    # No fixture can make the built-in leaks analyzer fail (a plugin cannot
    # take a built-in's name), so the page of a real run is given the data a
    # failed leaks analysis leaves (the host's plugin_failure row; the sink
    # then says leaks_ran false) and rendered: every place that would say
    # "no leak" says the analysis failed.
    _, d = run(cli, tmp_path, "leaks", rc=0)
    page = page_of(d)
    data = page_data(page)
    data["leaks_ran"] = False
    data["findings"].pop("leaks", None)  # it found nothing before it stopped
    data["leak_total"], data["leak_kinds"] = [0, 0], {}
    data["plugin_failures"] = [{"plugin": "leaks", "kind": "analyzer", "what": "crashed (SIGSEGV) in on_event"}]
    text = page.read_text()
    head, rest = text.split('id="msms-data">', 1)
    failed = tmp_path / "failed.html"
    failed.write_text(head + 'id="msms-data">' + json.dumps(data).replace("</", "<\\/") + "</script>" +
                      rest.split("</script>", 1)[1])
    dom = re.sub(r"<script.*?</script>", "", render(failed, tmp_path), flags=re.S)  # what the page shows
    assert banner(dom) == ["Plugin 'leaks' (analyzer) failed: crashed (SIGSEGV) in on_event. "
                           "This page is without what it would have added."]
    assert re.search(r'id="no-leaks">The leaks analysis failed \(crashed \(SIGSEGV\) in on_event\), so it gave no '
                     r'answer\.</p>', dom), dom
    assert "not judged: the analysis failed" in dom
    assert "reported no leak" not in dom
