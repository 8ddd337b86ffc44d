"""The html report in a real browser (Debian's headless Chromium), and sink
selection: --sinks, YAML sinks:, third-party sinks, unknown names."""
import html
import json
import re
from pathlib import Path

import pytest

from conftest import process_dirs
from sinks_common import ARTIFACTS, THIRD_PARTY_DIR, TS, drive, load_trace, only, render

BASE = ["--device=cpu", "--events=alloc,free", "--analysis="]


def browse(page, tmp_path, screenshot=None, test=None):
    """Loads the page; returns the DOM after its script ran. test: the
    page's test mode "CHART,FROM,TO" (drag over chart CHART from FROM to TO,
    fractions of its width, click the middle, go through the flame graph)."""
    hash = f"#msms-test={test}" if test else ""
    return render(page, tmp_path, screenshot, hash=hash, screenshot_hash=hash)


def canvases(dom):
    """The attributes of every chart canvas, in page order."""
    return [dict(re.findall(r'([a-z-]+)="([^"]*)"', tag)) for tag in re.findall(r'<canvas id="chart-[^>]*>', dom)]


def page_test_result(dom):
    m = re.search(r'<pre id="msms-test-result">(.*?)</pre>', dom, re.S)
    assert m, "the page's test mode wrote no result"
    return json.loads(html.unescape(m.group(1)))


def check_labels(state, charts):
    """Step labels and the peak label of each chart never overlap; every
    owner of a device's peak table is in its legend."""
    for c in state["charts"][:charts]:
        boxes = c["boxes"]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
        assert c["labels"] == sum(1 for b in boxes if not b[4])
    for legend, owners in zip(state["legends"], state["peak_owners"]):
        assert set(owners) <= set(legend), (owners, legend)


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
    assert re.search(r'<div class="v">2 \u00b7 5\.00 MiB</div>', dom)  # the leaks card: blocks and bytes
    assert '<canvas id="flame"' in dom and 'data-measure="peak"' in dom


def test_html_zoom_live_at_and_flame_graph_in_chromium(tmp_path):
    """Issue #19 item 2 on the rich stream: a drag over the PTA chart zooms
    every chart and the tables follow the range; a click lists what was
    live; the flame graph shows bytes at the peak, leaked and in total."""
    drive("html", tmp_path, "rich")
    page = tmp_path / f"report_{TS}.html"
    dom = browse(page, tmp_path, ARTIFACTS / "report_rich_zoomed.png", test="1,0.3,0.9")
    r = page_test_result(dom)
    b, a = r["before"], r["after"]
    check_labels(b, 3)
    check_labels(a, 3)
    zero, span = map(int, b["view"].split(","))
    assert zero == 0 and 65000 <= span < 66000 and [c["labels"] for c in b["charts"]] == [3, 3, 3]
    t0, t1 = map(int, a["view"].split(","))
    assert abs(t0 - 0.3 * span) < 1000 and abs(t1 - 0.9 * span) < 1000
    assert b["peak_titles"][1] == "Live at the peak (19.1 MiB in 22 blocks), by site"
    assert a["peak_titles"][1].startswith("Live at the highest point of the selected range (19.1 MiB at 41.0 ")
    assert b["sites"] == 7 and b["sites_note"].startswith("By bytes allocated over the whole run")
    assert a["sites_note"].startswith("By bytes allocated in the selected range") and a["sites"] == 1  # the temporaries
    assert r["live_at"]["title"].startswith("Live at ") and r["live_at"]["rows"] >= 2
    assert t0 < r["live_at"]["t"] < t1
    pta = (4 << 20) + (2 << 20) + sum((i + 1) << 16 for i in range(20))
    assert r["flame"]["npu:0 framework pools"]["peak"]["total"] == pta  # the device's peak
    assert r["flame"]["npu:0 framework pools"]["leaked"]["total"] == 2 << 20  # the leaks analyzer's gradient
    assert r["flame"]["npu:0 framework pools"]["total"]["total"] == pta + (8 << 20)
    assert r["flame"]["cpu host memory"] == {"peak": {"total": 3 << 20, "nodes": 4}, "leaked": {"total": 3 << 20, "nodes": 4},
                                             "total": {"total": 4 << 20, "nodes": 6}}
    assert r["flame_zoom"] == "train.py(14): main"  # the widest frame under the root


def test_html_steps_after_a_long_import_phase(tmp_path):
    """The CLI Python case of the issue: 8 steps in the last 5 % of the run.
    Whole run: labels that fit, none over another or the peak label; zoomed
    to the steps: all 8 labelled."""
    drive("html", tmp_path, "train", 20000)
    page = tmp_path / f"report_{TS}.html"
    dom = browse(page, tmp_path, ARTIFACTS / "report_train_steps.png", test="1,0.9,1.0")
    assert 'id="zoom-steps"' in dom
    r = page_test_result(dom)
    check_labels(r["before"], 2)
    check_labels(r["after"], 2)
    assert 1 <= r["before"]["charts"][1]["labels"] < 8
    assert [c["labels"] for c in r["after"]["charts"]] == [8, 8]
    assert r["after"]["legends"] == [["HOST"], ["PTA@ops@aten"]]  # decompose's owner names
    assert r["after"]["peak_titles"][1].startswith("Live at the highest point of the selected range (200 KiB at ")
    assert r["flame"]["cpu framework pools"]["leaked"]["total"] == 204800


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


def test_html_keeps_blocks_live_at_exit_live(cli, test_bin, tmp_path):
    """The shadow FREEs that close a dump at the end are not frees: the
    report's final bytes, blocks live at the end and the flame graph's
    leaked bytes (the leaks analyzer's host blocks, reported by site) are
    the leaks analyzer's "still allocated at exit"."""
    p = cli(["--device=cpu", "--call-stack=c:16", "--analysis=leaks", "--sinks=html", f"--output={tmp_path}", "--",
             test_bin / "demo_train"], tmp_path, check_rc=0)
    m = re.search(r"Host memory still allocated at exit on device cpu: (\d+) block\(s\), (\d+) bytes", p.stdout)
    assert m, p.stdout
    blocks, total = int(m.group(1)), int(m.group(2))
    page = only(only(process_dirs(tmp_path)).glob("report_*.html"))
    data = json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])
    dev = only(data["devices"])
    assert (dev["final"], dev["live"]) == (total, blocks)
    assert sum(f[3] for f in dev["flame"]) + dev["flame_rest"][2] == total
    assert dev["leaked_by"] == "leaks" and (dev["leak_blocks"], dev["leak_bytes"]) == (blocks, total)
    # the flame graph's paths start at the outermost frame
    leak_site = max(dev["flame"], key=lambda f: f[3])[0]
    path = [data["frames"][i] for i in data["site_paths"][leak_site]]
    assert path[0].startswith("_start") and "demo_train.c" in path[-1]


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
