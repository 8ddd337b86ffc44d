"""The html report in a real browser (Debian's headless Chromium), and sink
selection: --sinks, YAML sinks:, third-party sinks, unknown names."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import process_dirs
from sinks_common import ARTIFACTS, THIRD_PARTY_DIR, TS, drive, load_trace, only

BASE = ["--device=cpu", "--events=alloc,free", "--analysis="]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1400,2400"]


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not installed (it is in .ci/packages)"
    return exe


def browse(page, tmp_path, screenshot=None):
    """Loads the page; returns the DOM after its script ran."""
    args = [chromium()] + CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run(args + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run(args + [f"--screenshot={screenshot}", page.as_uri()], capture_output=True, text=True,
                              timeout=180)
        assert shot.returncode == 0 and screenshot.stat().st_size > 10000, shot.stderr
    return dom.stdout


def canvases(dom):
    """The attributes of every chart canvas, in page order."""
    return [dict(re.findall(r'([a-z-]+)="([^"]*)"', tag)) for tag in re.findall(r"<canvas [^>]*>", dom)]


def rows(dom, table_id):
    m = re.search(r'<table id="%s" data-rows="(\d+)">(.*?)</table>' % re.escape(table_id), dom, re.S)
    assert m, f"no table {table_id}"
    body = m.group(2).split("<tbody>")[1]
    assert body.count("<tr>") == int(m.group(1))
    return int(m.group(1))


def test_html_report_in_chromium(tmp_path):
    drive("html", tmp_path, "rich")
    page = tmp_path / f"report_{TS}.html"
    html = page.read_text()
    # self-contained: no external script, style, image or link
    assert not re.search(r'<script[^>]+src=|<link |https?://|<img ', html)
    dom = browse(page, tmp_path, ARTIFACTS / "report_rich.png")
    assert 'data-ready="1"' in dom
    charts = canvases(dom)
    assert [(c["data-device"], c["data-series"], c["data-drawn"]) for c in charts] == [
        ("npu:0 device memory (driver)", "1", "true"), ("npu:0 framework pools", "3", "true"),
        ("cpu host memory", "1", "true")]
    assert [int(c["data-points"]) for c in charts] == [1, 44, 3]
    assert rows(dom, "table-peak-1") == 3  # weight, 20 temporaries, gradient at the peak of the PTA pool
    assert rows(dom, "table-sites") == 7
    assert rows(dom, "table-finding-leaks") == 2
    assert rows(dom, "table-finding-inefficient") == 1
    assert rows(dom, "table-finding-owners") == 1
    assert "PTA@weight" in dom and "leaky_cache" in dom
    assert re.search(r'<div class="v">2</div>', dom)  # the leaks card


def test_html_report_of_a_large_capture(tmp_path):
    """2 million events give a small page (downsampled curves, grouped blocks) that still draws."""
    drive("html", tmp_path, "big", 2000000)
    page = tmp_path / f"report_{TS}.html"
    assert page.stat().st_size < 2_000_000
    data = json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])
    dev = only(data["devices"])
    assert dev["mallocs"] == 1000000 and len(dev["t"]) <= 8000
    assert max(map(sum, zip(*dev["v"]))) == dev["peak"]  # the peak survives downsampling
    assert dev["peak_blocks"] == 512 and sum(g["count"] for g in dev["at_peak"]) <= 512
    dom = browse(page, tmp_path, ARTIFACTS / "report_big.png")
    assert 'data-ready="1"' in dom
    chart = only(canvases(dom))
    assert chart["data-drawn"] == "true" and chart["data-series"] == "5" and int(chart["data-points"]) > 1000
    assert rows(dom, "table-sites") == 50
    assert rows(dom, "table-finding-leaks") == 2


def test_sinks_by_name_on_the_command_line(cli, test_bin, tmp_path):
    p = cli(BASE + ["--sinks=trace,html", f"--output={tmp_path}", "--", test_bin / "sinks_alloc_loop", "2000"],
            cwd=tmp_path, check_rc=0)
    proc = only(process_dirs(tmp_path))
    assert only((proc / "device_cpu" / "dump").glob("memscope_dump_*.csv"))  # --data-format stays csv
    trace = only(proc.glob("trace_*.json"))
    doc = load_trace(trace)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "cpu HOST allocated"]
    assert len(counters) > 2000
    page = only(proc.glob("report_*.html"))
    assert f"    {trace.name} (" in p.stdout and f"    {page.name} (" in p.stdout
    dom = browse(page, tmp_path)
    assert 'data-ready="1"' in dom
    chart = only(canvases(dom))
    assert chart["data-device"] == "cpu host memory" and chart["data-drawn"] == "true"


def test_sinks_from_yaml_and_third_party(cli, test_bin, tmp_path):
    cfg = tmp_path / "profile.yaml"
    cfg.write_text("device: cpu\nevents: alloc,free\nanalysis: ''\ndata_format: db\nsinks: [trace, rowcount]\n")
    cli([f"--config={cfg}", f"--plugin-path={THIRD_PARTY_DIR}", f"--output={tmp_path}", "--",
         test_bin / "sinks_alloc_loop", "1000"], cwd=tmp_path, check_rc=0)
    proc = only(process_dirs(tmp_path))
    assert only((proc / "device_cpu" / "dump").glob("memscope_dump_*.db"))
    assert only(proc.glob("trace_*.json"))
    counts = dict(line.split() for line in (proc / "rowcount.txt").read_text().splitlines())
    assert int(counts["MALLOC"]) >= 1000 and int(counts["FREE"]) >= 700
    assert not list(proc.glob("report_*.html"))
    config = json.loads((proc / "config.json").read_text())
    assert config["sinks"] == ["db", "trace", "rowcount"]


def test_unknown_sink_names(cli, test_bin, tmp_path):
    p = cli(BASE + ["--sinks=htlm", f"--output={tmp_path}", "--", test_bin / "sinks_alloc_loop", "10"], cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("msmemscope: error: --sinks: unknown sink 'htlm'; did you mean 'html'? (available: ")
    p = cli(BASE + ["--data-format=json", f"--output={tmp_path}", "--", test_bin / "sinks_alloc_loop", "10"],
            cwd=tmp_path)
    assert p.returncode == 2
    assert "--data-format" in p.stderr and "json" in p.stderr
    assert not process_dirs(tmp_path)
