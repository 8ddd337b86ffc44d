"""Helpers shared by the test_sinks_*.py suites and the html tests (a page
rendered in headless Chromium)."""
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from conftest import BUILD, TEST_BIN

PLUGINS = BUILD / "lib" / "msmemscope" / "plugins"
DRIVER = TEST_BIN / "sinks_driver"
THIRD_PARTY_DIR = BUILD / "tests" / "lib" / "sink_plugins"
ARTIFACTS = BUILD / "tests" / "artifacts" / "sinks"
TS = "20260101000000"

DB_COLUMNS = [("ID", "INTEGER"), ("Event", "TEXT"), ("Event Type", "TEXT"), ("Name", "TEXT"),
              ("Timestamp(ns)", "INTEGER"), ("Process Id", "INTEGER"), ("Thread Id", "INTEGER"),
              ("Device Id", "TEXT"), ("Ptr", "TEXT"), ("Attr", "TEXT"), ("Call Stack(Python)", "TEXT"),
              ("Call Stack(C)", "TEXT")]


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def plugin(name):
    return PLUGINS / f"libmsmemscope_plugin_{name}.so"


def drive(sink, out, scenario, *args):
    """Runs the synthetic stream through one sink; returns the driver's stdout."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([str(DRIVER), str(plugin(sink)), str(out), scenario] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"driver failed:\n{p.stdout}\n{p.stderr}"
    assert p.stdout.rstrip().endswith("ok"), p.stdout
    return p.stdout


def db_query(path, sql, args=()):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def check_db(path):
    """A complete, consistent msmemscope DB; returns the memscope_dump rows."""
    assert Path(path).exists(), path
    assert db_query(path, "PRAGMA integrity_check") == [("ok",)]
    layout = db_query(path, "SELECT value FROM msms_meta WHERE key='layout'")
    if layout == [("table",)]:
        assert db_query(path, "SELECT name, type FROM pragma_table_info('memscope_dump') ORDER BY cid") == DB_COLUMNS
        assert db_query(path, "PRAGMA user_version") == [(1,)]
    else:
        # the default: memscope_dump is a view over rows that store each
        # stack once; SQLite declares upstream's type for the 8 columns taken
        # straight from its tables and none for the 4 it computes (Ptr, Attr,
        # the stacks), so the values' own types are checked below
        assert layout == [("view",)]
        assert db_query(path, "SELECT name, type FROM pragma_table_info('memscope_dump') ORDER BY cid") == \
            DB_COLUMNS[:8] + [(n, "") for n, _ in DB_COLUMNS[8:]]
        assert db_query(path, "SELECT type FROM sqlite_master WHERE name='memscope_dump'") == [("view",)]
        assert db_query(path, "PRAGMA user_version") == [(2,)]
    assert db_query(path, "SELECT value FROM msms_meta WHERE key='complete'") == [("true",)]
    rows = db_query(path, 'SELECT * FROM memscope_dump ORDER BY "ID"')
    sql_type = {"INTEGER": int, "TEXT": str}
    for r in rows:
        json.loads(r[9])  # Attr is JSON
        assert [type(v) for v in r] == [sql_type[t] for _, t in DB_COLUMNS], r
    return rows


def load_trace(path):
    """Parses and validates a trace-event file; returns its dict."""
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    assert isinstance(events, list)
    last = {}
    for e in events:
        assert e["ph"] in ("M", "C", "X", "i"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["name"], str), e
        if e["ph"] == "M":
            continue
        assert e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g"), e
        if e["ph"] == "C":
            # counters of one track come in time order, with a byte value
            assert set(e["args"]) == {"bytes"}, e
            assert e["ts"] >= last.get(e["name"], 0), e
            last[e["name"]] = e["ts"]
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["tool"] == "msmemscope"
    return doc


def only(paths):
    paths = list(paths)
    assert len(paths) == 1, paths
    return paths[0]


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not installed (it is in .ci/packages)"
    return exe


def render(page, tmp_path, screenshot=None, hash="", window=(1400, 2400), virtual_time_ms=None, screenshot_hash=""):
    """Loads the html page (its URL ending in hash, e.g. a test mode) in
    headless Chromium with a window of (width, height); returns the DOM after
    its script ran. virtual_time_ms: Chromium's --virtual-time-budget (how
    long the page's timers run before the DOM is read). screenshot: a PNG of
    the page too, its URL ending in screenshot_hash."""
    args = [chromium()] + CHROMIUM_FLAGS + (
        [f"--virtual-time-budget={virtual_time_ms}"] if virtual_time_ms is not None else []) + [
        f"--window-size={window[0]},{window[1]}", f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run(args + ["--dump-dom", page.as_uri() + hash], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run(args + [f"--screenshot={screenshot}", page.as_uri() + screenshot_hash],
                              capture_output=True, text=True, timeout=180)
        assert shot.returncode == 0 and screenshot.stat().st_size > 10000, shot.stderr
    return dom.stdout
