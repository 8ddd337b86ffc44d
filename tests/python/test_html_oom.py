"""The HTML report tells that allocations failed for lack of memory: a card
with the failures per device, a section listing them (the failing call, the
requested size, the stack when collected) and, with --analysis=oom, the
largest and most recent blocks live at the failure as the oom analysis
listed them; a red mark on the charts of the failing device, whose tooltip
names the call and the size. The page's figures are checked against the
rows of the same run's CSV, on real workloads: a C program whose malloc
fails under RLIMIT_AS, a PyTorch script asking for too large a tensor under
RLIMIT_AS, the simulated CUDA driver's out-of-memory answer; and under
--aggregate (no rows). Without a failure the page shows nothing of it."""
import json
import re
import subprocess
import textwrap

import pytest

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli
from sinks_common import ARTIFACTS, only, render
from test_html_truth import page_data

PY = "/usr/bin/python3"
ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}


def dur(ns):
    """The page's dur() (report_template.h)."""
    if ns >= 60e9:
        return f"{ns / 60e9:.1f} min"
    if ns >= 1e9:
        return f"{ns / 1e9:.{1 if ns >= 10e9 else 2}f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.{1 if ns >= 10e6 else 2}f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} \u00b5s"
    return f"{ns} ns"


def human(b):
    """The page's human() for b >= 0."""
    u, v, i = ["B", "KiB", "MiB", "GiB", "TiB"], float(b), 0
    while v >= 1024 and i < 4:
        v /= 1024
        i += 1
    if i == 0:
        return f"{int(v)} B"
    return f"{v:.{0 if v >= 100 else 1 if v >= 10 else 2}f} {u[i]}"


def dom(page, tmp_path, screenshot=None):
    # the DOM in the page's hover mode (#msms-oom-hover); the screenshot as the page first shows
    return render(page, tmp_path, screenshot, hash="#msms-oom-hover", window=(1400, 3000))


def hover(html_text):
    m = re.search(r'<pre id="msms-oom-hover">([^<]*)</pre>', html_text)
    assert m, html_text[-3000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def cells(html_text, table_id):
    """The text of each row's cells of a table of the page (stack cells included as text)."""
    m = re.search(r'<table id="%s"[^>]*>.*?<tbody>(.*?)</tbody>' % re.escape(table_id), html_text, re.S)
    assert m, table_id
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S)
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]


def labels_clear(html_text):
    """Each chart with failures labels them once ("out of memory"), over no other label (the peak's, a step's)."""
    charts = re.findall(r'<canvas id="chart-\d+"[^>]*data-label-boxes="([^"]*)"[^>]*data-oom-marks="(\d+)"', html_text)
    assert charts
    for boxes, marks in charts:
        boxes = json.loads(boxes)
        assert sum(1 for b in boxes if b[4] == 2) == (1 if int(marks) else 0), boxes
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)


def merged_stack(row):
    py = row["Call Stack(Python)"].rstrip("\n")
    c = row["Call Stack(C)"]
    return py + ("\n" if py and c else "") + c


def oom_rows(rows, typ):
    return [r for r in rows if r["Event Type"] == typ or (typ.startswith("OOM_Snapshot") and r["Name"] == typ)]


def check_blocks(data, listed, rows, typ):
    """The page's blocks of a failure are the OOM_DETAIL rows of that kind at its time."""
    at = [r for r in rows if r["Event Type"] == typ and int(r["Timestamp(ns)"]) == data["start_ns"] + listed["t"]]
    assert at, typ
    assert [(b["pool"], b["ptr"], b["size"], data["start_ns"] + b["t"], b["step"], b["stack"]) for b in listed[
        "top" if typ == "OOM_TOP_ALLOC" else "recent"]] == [
        (r["attr"]["pool"], r["attr"]["ptr"], int(r["attr"]["size"]), int(r["attr"]["timestamp"]), r["attr"]["step"],
         merged_stack(r)) for r in at]
    return at


def native(tmp_path, analysis, *extra):
    p = run_cli(["--device=cpu", "--call-stack=c:16", f"--analysis={analysis}", "--output=out", *extra, "--",
                 TEST_BIN / "analyzers_oom"], tmp_path, check_rc=3)
    assert "malloc failed as expected" in p.stdout
    return p, only(process_dirs(tmp_path / "out"))


@pytest.fixture(scope="module")
def native_oom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native_oom")
    p, d = native(tmp, "oom:3", "--sinks=csv,html")
    return tmp, p, d


def test_native_failure_on_the_page_as_in_the_csv(native_oom):
    tmp, p, d = native_oom
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    rows = read_dump(only(dump_files(d)))
    [snap] = oom_rows(rows, "OOM_Snapshot")
    [trig] = oom_rows(rows, "OOM_TRIGGER")
    assert "oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)" in p.stdout
    oom = data["oom"]
    assert oom["failures"] == 1 and oom["analysis"] is True
    assert oom["devices"] == [{"device": "cpu", "count": 1, "first_t": oom["listed"][0]["t"],
                               "last_t": oom["listed"][0]["t"]}]
    [f] = oom["listed"]
    assert data["start_ns"] + f["t"] == int(trig["Timestamp(ns)"]) == int(snap["Timestamp(ns)"])
    assert (f["func"], f["req_size"]) == (trig["attr"]["func"], int(trig["attr"]["req_size"])) == ("malloc", 64 << 30)
    assert (f["flag"], f["ret"]) == (trig["attr"]["flag"], trig["attr"]["ret"])
    assert f["allocated"] == int(snap["attr"]["allocated"])
    # the failing call's stack, as the OOM_Snapshot row has it
    assert f["stack"] == merged_stack(snap) and "main" in f["stack"]
    top = check_blocks(data, f, rows, "OOM_TOP_ALLOC")
    assert [b["size"] for b in f["top"]] == [8 << 20, 7 << 20, 6 << 20] and len(top) == 3
    assert len(check_blocks(data, f, rows, "OOM_RECENT_ALLOC")) == 3
    assert all("big_block" in b["stack"] for b in f["top"])

    text = dom(page, tmp, ARTIFACTS / "report_native_oom_1400.png")
    assert re.search(r'<div class="card oom" id="card-oom"><div class="k">out-of-memory failures</div>'
                     r'<div class="v">1 \u00b7 cpu 1</div></div>', text), text[:3000]
    assert '<h2 id="oom-title">Out of memory: 1 allocation failed</h2>' in text
    assert (f'<li data-device="cpu">device cpu: 1 failure at {dur(f["t"])} (red on its charts below; hover for the '
            'call)</li>') in text
    [row] = cells(text, "table-oom")
    assert row[:5] == [dur(f["t"]), "cpu", "malloc", "64.0 GiB (68,719,476,736 B)", human(f["allocated"])]
    assert row[5] == f"{human(f['free'])} of 4.00 GiB, the address-space limit (RLIMIT_AS)"
    assert "main" in row[6]
    assert [r[0] for r in cells(text, "table-oom-top-0")] == [
        "8.00 MiB (8,388,608 B)", "7.00 MiB (7,340,032 B)", "6.00 MiB (6,291,456 B)"]
    assert [r[2] for r in cells(text, "table-oom-recent-0")] == [b["ptr"] for b in f["recent"]]
    assert 'id="oom-no-details"' not in text and 'id="oom-interval"' not in text
    # the mark on the cpu chart, and what hovering it says
    charts = re.findall(r'<canvas id="chart-\d+" data-device="([^"]*)"[^>]*data-oom-marks="(\d+)"', text)
    assert charts == [("cpu host memory", "1")], charts
    assert 'data-oom-label="out of memory"' in text
    labels_clear(text)
    assert hover(text) == [{"device": "cpu host memory", "tips": [
        f"out of memory at {dur(f['t'])}: malloc of 64.0 GiB (68,719,476,736 bytes) failed on cpu with "
        f"{human(f['allocated'])} allocated"]}]


def test_native_failure_without_the_oom_analysis(tmp_path, native_oom):
    """Without --analysis=oom the rows have the OOM_Snapshot alone; the page
    still names the call and the size (stderr says the same), and says where
    the blocks live at the failure would come from."""
    p, d = native(tmp_path, "leaks", "--sinks=csv,html")
    rows = read_dump(only(dump_files(d)))
    assert not [r for r in rows if r["Event"] == "OOM_DETAIL"]
    [snap] = oom_rows(rows, "OOM_Snapshot")
    m = re.search(r"oom: malloc of (\d+) bytes failed on device cpu with (\d+) bytes allocated", p.stderr)
    assert m, p.stderr
    data = page_data(only(d.glob("report_*.html")))
    [f] = data["oom"]["listed"]
    assert data["oom"]["failures"] == 1 and data["oom"]["analysis"] is False
    assert (f["func"], f["req_size"], f["allocated"]) == ("malloc", int(m.group(1)), int(m.group(2)))
    assert f["allocated"] == int(snap["attr"]["allocated"])
    assert data["start_ns"] + f["t"] == int(snap["Timestamp(ns)"])
    assert f["stack"] == merged_stack(snap) and f["top"] == f["recent"] == [] and f["details"] is False
    text = dom(only(d.glob("report_*.html")), tmp_path)
    assert ('<p class="note" id="oom-no-details">The oom analysis did not run: --analysis=oom lists the largest and '
            'the most recent blocks live at each failure.</p>') in text
    assert '<table id="table-oom-top-' not in text
    [row] = cells(text, "table-oom")
    assert row[2:4] == ["malloc", "64.0 GiB (68,719,476,736 B)"]


def test_native_failure_under_aggregate(tmp_path, native_oom):
    """--aggregate writes no rows: the page says the same as with them."""
    p, d = native(tmp_path, "oom:3", "--aggregate", "--sinks=html")
    assert not list(d.glob("device_*/dump/*.csv"))
    with_rows = page_data(only(native_oom[2].glob("report_*.html")))["oom"]
    oom = page_data(only(d.glob("report_*.html")))["oom"]
    assert oom["failures"] == 1 and oom["analysis"] is True
    [f], [g] = oom["listed"], with_rows["listed"]
    assert (f["func"], f["req_size"], f["details"]) == (g["func"], g["req_size"], True) == ("malloc", 64 << 30, True)
    assert [(b["pool"], b["size"]) for b in f["top"]] == [(b["pool"], b["size"]) for b in g["top"]]
    assert len(f["recent"]) == 3
    assert "oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)" in p.stdout


TORCH_SCRIPT = """\
import resource

import torch

keep = [torch.ones(1 << 18) for _ in range(4)]  # 1 MiB each


def vm_size():
    with open("/proc/self/status") as f:
        return int([l for l in f if l.startswith("VmSize:")][0].split()[1]) * 1024


soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (512 << 20), hard))
failed = 0
for i in range(3):
    try:
        torch.empty(8 << 30, dtype=torch.uint8)  # 8 GiB: more than the limit leaves
    except RuntimeError:
        failed += 1
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print("failed", failed)
"""


def test_pytorch_failures_under_rlimit(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "too_large.py"
    script.write_text(TORCH_SCRIPT)
    p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=oom:2", "--sinks=csv,html", "--output=out", "--",
                 PY, script], tmp_path, env=ENV, check_rc=0)
    assert "failed 3" in p.stdout
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    snaps, trigs = oom_rows(rows, "OOM_Snapshot"), oom_rows(rows, "OOM_TRIGGER")
    assert len(snaps) == len(trigs) == 3
    assert "oom: 3 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)" in p.stdout
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    oom = data["oom"]
    assert oom["failures"] == 3 and [x["device"] for x in oom["devices"]] == ["cpu"]
    assert [(data["start_ns"] + f["t"], f["func"], f["req_size"], f["allocated"]) for f in oom["listed"]] == [
        (int(t["Timestamp(ns)"]), t["attr"]["func"], int(t["attr"]["req_size"]), int(s["attr"]["allocated"]))
        for t, s in zip(trigs, snaps)]
    assert {f["func"] for f in oom["listed"]} == {"posix_memalign"} and oom["listed"][0]["req_size"] == 8 << 30
    # the program's line in each failure's stack
    line = 1 + TORCH_SCRIPT.splitlines().index("        torch.empty(8 << 30, dtype=torch.uint8)  # 8 GiB: more than the limit leaves")
    for f, s in zip(oom["listed"], snaps):
        assert f["stack"] == merged_stack(s) and re.search(r"too_large\.py\(%d\): <module>" % line, f["stack"]), f["stack"]
    # the blocks once a second per device: at the first failure only; the tensors are among them
    assert [f["details"] for f in oom["listed"]] == [True, False, False]
    first = oom["listed"][0]
    check_blocks(data, first, rows, "OOM_TOP_ALLOC")
    check_blocks(data, first, rows, "OOM_RECENT_ALLOC")
    assert [(b["pool"], b["size"]) for b in first["top"]] == [("PTA", 1 << 20)] * 2
    text = dom(page, tmp_path, ARTIFACTS / "report_torch_oom_1400.png")
    assert '<h2 id="oom-title">Out of memory: 3 allocations failed</h2>' in text
    assert re.search(r'id="card-oom"><div class="k">out-of-memory failures</div><div class="v">3 \u00b7 cpu 3</div>', text)
    f0, f2 = oom["listed"][0], oom["listed"][2]
    assert (f'<li data-device="cpu">device cpu: 3 failures, the first at {dur(f0["t"])}, the last at {dur(f2["t"])} '
            '(red on its charts below; hover for the call)</li>') in text
    assert [r[2:4] for r in cells(text, "table-oom")] == [["posix_memalign", "8.00 GiB (8,589,934,592 B)"]] * 3
    assert ('<p class="note" id="oom-interval">The oom analysis lists the blocks at most once per second per device '
            '(--plugin-option=oom.interval_ms=N): not at 2 of these failures.</p>') in text
    # both cpu charts (framework pools and host memory) carry the three marks
    charts = dict(re.findall(r'<canvas id="chart-\d+" data-device="([^"]*)"[^>]*data-oom-marks="(\d+)"', text))
    assert charts == {"cpu framework pools": "3", "cpu host memory": "3"}, charts
    labels_clear(text)
    for c in hover(text):
        assert len(c["tips"]) == 3
        for tip in c["tips"]:
            assert re.fullmatch(r"out of memory at [^:]+: posix_memalign of 8\.00 GiB \(8,589,934,592 bytes\) failed "
                                r"on cpu with [0-9.]+ [KMG]?i?B allocated(\n.*)*", tip), tip


def test_simulated_cuda_driver_failure(cli, test_bin, tmp_path):
    from cuda_helpers import run_cuda
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["oom"], env={"FAKE_CUDA_MEM_LIMIT": "1048576"},
                    extra=["--analysis=oom:1", "--sinks=csv,html"])
    assert "oom rc=2" in p.stdout
    rows = read_dump(only(dump_files(d, "0")))
    [snap], [trig] = oom_rows(rows, "OOM_Snapshot"), oom_rows(rows, "OOM_TRIGGER")
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    [f] = data["oom"]["listed"]
    assert data["oom"]["devices"][0]["device"] == f["device"] == "cuda:0" and data["oom"]["failures"] == 1
    assert (data["start_ns"] + f["t"], f["func"], f["req_size"], f["allocated"]) == (
        int(trig["Timestamp(ns)"]), "cuMemAlloc_v2", 1048576, int(snap["attr"]["allocated"])) == (
        int(trig["Timestamp(ns)"]), trig["attr"]["func"], int(trig["attr"]["req_size"]), 524288)
    [top] = check_blocks(data, f, rows, "OOM_TOP_ALLOC")
    assert (top["attr"]["pool"], top["attr"]["size"]) == ("HAL", "524288")
    check_blocks(data, f, rows, "OOM_RECENT_ALLOC")
    text = dom(page, tmp_path)
    assert re.search(r'id="card-oom"><div class="k">out-of-memory failures</div><div class="v">1 \u00b7 cuda:0 1</div>', text)
    charts = dict(re.findall(r'<canvas id="chart-\d+" data-device="([^"]*)"[^>]*data-oom-marks="(\d+)"', text))
    assert charts["cuda:0 device memory (driver)"] == "1", charts
    tips = {c["device"]: c["tips"] for c in hover(text)}
    assert tips["cuda:0 device memory (driver)"] == [
        f"out of memory at {dur(f['t'])}: cuMemAlloc_v2 of 1.00 MiB (1,048,576 bytes) failed on cuda:0 with 512 KiB allocated"]
    assert [r[0] for r in cells(text, "table-oom-top-0")] == ["512 KiB (524,288 B)"]


def test_no_failure_no_oom_on_the_page(tmp_path):
    run_cli(["--device=cpu", "--analysis=oom", "--sinks=html", "--output=out", "--", TEST_BIN / "demo_train"], tmp_path,
            check_rc=0)
    page = only(only(process_dirs(tmp_path / "out")).glob("report_*.html"))
    data = page_data(page)
    assert data["oom"]["failures"] == 0 and data["oom"]["listed"] == [] and data["devices"]
    text = dom(page, tmp_path)
    assert '<section id="oom">' not in text and 'id="card-oom"' not in text and "<h2>Memory over time</h2>" in text
    marks = re.findall(r'data-oom-marks="(\d+)"', text)
    assert marks and set(marks) == {"0"}
    labels_clear(text)
    hovered = hover(text)
    assert hovered and all(c["tips"] == [] for c in hovered)


def test_simulated_npu_driver_failure(cli, tmp_path):
    """The simulated Ascend driver refuses halMemAlloc on device 1 (npu_train,
    test_npu_backend.py): the page names that device, marks the failure on its
    charts and lists the blocks as the OOM_DETAIL rows do."""
    from test_npu_backend import run_train
    p, d = run_train(cli, tmp_path, "--device=npu:1", "--analysis=oom", "--sinks=csv,html")
    rows = read_dump(only(dump_files(d, "1")))
    [snap], [trig] = oom_rows(rows, "OOM_Snapshot"), oom_rows(rows, "OOM_TRIGGER")
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    assert [(x["device"], x["count"]) for x in data["oom"]["devices"]] == [("npu:1", 1)]
    [f] = data["oom"]["listed"]
    assert (data["start_ns"] + f["t"], f["func"], f["req_size"], f["flag"], f["ret"], f["allocated"]) == (
        int(trig["Timestamp(ns)"]), "halMemAlloc", 96 << 20, trig["attr"]["flag"], "6", int(snap["attr"]["allocated"]))
    assert check_blocks(data, f, rows, "OOM_TOP_ALLOC") and check_blocks(data, f, rows, "OOM_RECENT_ALLOC")
    text = dom(page, tmp_path)
    charts = dict(re.findall(r'<canvas id="chart-\d+" data-device="([^"]*)"[^>]*data-oom-marks="(\d+)"', text))
    assert {k: v for k, v in charts.items() if k.startswith("npu:1")} == {
        "npu:1 device memory (driver)": "1", "npu:1 framework pools": "1"}, charts
    assert {v for k, v in charts.items() if not k.startswith("npu:1")} <= {"0"}
    tips = {c["device"]: c["tips"] for c in hover(text)}
    assert tips["npu:1 framework pools"] == [
        f"out of memory at {dur(f['t'])}: halMemAlloc of 96.0 MiB (100,663,296 bytes) failed on npu:1 with "
        f"{human(f['allocated'])} allocated"]


def test_python_api_page(tmp_path):
    """With the Python API (plain python3, no CLI) the page says the same:
    tests/programs/python/oom_cpu.py writing the html too."""
    pytest.importorskip("torch")
    from conftest import SOURCE, clean_env
    text = (SOURCE / "tests" / "programs" / "python" / "oom_cpu.py").read_text()
    assert "output=sys.argv[1])" in text
    (tmp_path / "api_oom.py").write_text(text.replace("output=sys.argv[1])", 'output=sys.argv[1], sinks="csv,html")'))
    p = subprocess.run([PY, str(tmp_path / "api_oom.py"), "out", "oom:3"], cwd=str(tmp_path), env=clean_env(),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "allocation failed" in p.stdout, p.stderr
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    [snap], [trig] = oom_rows(rows, "OOM_Snapshot"), oom_rows(rows, "OOM_TRIGGER")
    data = page_data(only(d.glob("report_*.html")))
    [f] = data["oom"]["listed"]
    assert (data["start_ns"] + f["t"], f["func"], f["req_size"], f["allocated"]) == (
        int(trig["Timestamp(ns)"]), "posix_memalign", 1 << 50, int(snap["attr"]["allocated"])) and f["allocated"] == 4 << 20
    assert [(b["pool"], b["size"]) for b in f["top"]] == [("PTA", 1 << 20)] * 3
    check_blocks(data, f, rows, "OOM_TOP_ALLOC")
    check_blocks(data, f, rows, "OOM_RECENT_ALLOC")


MANY_SCRIPT = """\
import resource


def vm_size():
    with open("/proc/self/status") as f:
        return int([l for l in f if l.startswith("VmSize:")][0].split()[1]) * 1024


soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (256 << 20), hard))
failed = 0
for i in range(1500):
    try:
        bytearray(4 << 30)
    except MemoryError:
        failed += 1
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print("failed", failed)
"""


def test_a_failing_loop(tmp_path):
    """1500 failures: all counted (as many as the OOM_Snapshot rows), the
    first 1000 marked, the first 100 in the table, the count on the label."""
    script = tmp_path / "many.py"
    script.write_text(MANY_SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=oom:2", "--sinks=csv,html", "--output=out", "--", PY, script], tmp_path,
                env=ENV, check_rc=0)
    assert "failed 1500" in p.stdout
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    snaps, trigs = oom_rows(rows, "OOM_Snapshot"), oom_rows(rows, "OOM_TRIGGER")
    assert len(snaps) == len(trigs) == 1500
    # the blocks at most once a second of the run's time (oom.interval_ms):
    # one dump when the loop takes under a second, more on a loaded machine
    dumps, last = 0, None
    for t in trigs:
        ts = int(t["Timestamp(ns)"])
        if last is None or ts - last >= 1_000_000_000:
            dumps, last = dumps + 1, ts
    assert f"oom: 1500 out-of-memory failure(s), {dumps} detail dump(s) written (OOM_DETAIL rows)" in p.stdout
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    oom = data["oom"]
    assert oom["failures"] == 1500 and [(x["device"], x["count"]) for x in oom["devices"]] == [("cpu", 1500)]
    assert oom["devices"][0]["last_t"] + data["start_ns"] == int(trigs[-1]["Timestamp(ns)"])
    assert [(data["start_ns"] + f["t"], f["func"], f["req_size"]) for f in oom["listed"]] == [
        (int(t["Timestamp(ns)"]), t["attr"]["func"], int(t["attr"]["req_size"])) for t in trigs[:1000]]
    text = dom(page, tmp_path)
    assert '<h2 id="oom-title">Out of memory: 1,500 allocations failed</h2>' in text
    assert '<p class="note" id="oom-unlisted">The charts mark the first 1,000 failures of the run.</p>' in text
    assert "<h3>The first 100 failures</h3>" in text and len(cells(text, "table-oom")) == 100
    assert re.findall(r'data-device="cpu host memory"[^>]*data-oom-marks="(\d+)"', text) == ["1000"]
    assert re.findall(r'data-device="cpu host memory"[^>]*data-oom-label="([^"]*)"', text) == ["out of memory (1,500)"]
    labels_clear(text)
