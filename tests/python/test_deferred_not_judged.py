"""Blocks that were there when a deferred collection started are not judged.

With --collect-mode=deferred the agent writes the blocks allocated before
start() as shadow MALLOC rows when collection starts (upstream does the
same). Upstream's analyses leave shadow events alone; ours counted those
still allocated at the end as leaked: a PyTorch script that started after
`import torch` read "Host memory still allocated at stop() on device cpu:
327280 block(s), 66021239 bytes" (the import's heap) for a program that
leaked 16 KiB and a few host blocks, and so did summary.json's leaks and
top_sites and the HTML page's leaked-blocks card and tables.

Now they are in no leak total or count (console, summary.json, HTML, run
index), and the report says once per device how many were still allocated:
"  Not judged on device cpu: N block(s), B bytes allocated before collection
started were still allocated at stop() (no stack: allocated while
collection was off)" (summary.json leaks.not_judged_before_start; the
findings table leaks_not_judged, a note under the page's Leaks title).
The counts are checked against the dump: the shadow MALLOC rows of the
start whose block ends with the end's shadow FREE.
"""
import csv
import json
import re

import pytest

from conftest import DUMP_HEADER, TEST_BIN, dump_files, parse_attr, process_dirs, run_cli
from sinks_common import only

PY = "/usr/bin/python3"
ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}
NOT_JUDGED = ("  Not judged on device {dev}: {n} block(s), {b} bytes allocated before collection started were still "
              "allocated at stop() (no stack: allocated while collection was off)")


def before_start_live(dump, pool="HOST"):
    """From the dump: the blocks written as shadow MALLOCs of `pool` (not the
    imports' heap) that were still allocated at the end (their FREE is the
    end's shadow FREE), less those whose address a PTA block took (a CPU
    framework block is that host block's memory, counted once, as the
    framework's). Returns (blocks, bytes, sizes)."""
    born, ended, pta = {}, set(), set()
    with open(dump, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            ev, typ, ptr, attr = rec[1], rec[2], rec[8], rec[9]
            if typ == "PTA" and ev == "MALLOC":
                pta.add(ptr)
            if typ != pool or ev not in ("MALLOC", "FREE") or "shadow:true" not in attr:
                continue
            a = parse_attr(attr)
            if ev == "MALLOC" and a.get("import") != "true":
                born[a["allocation_id"]] = (int(a["size"]), ptr)
            elif ev == "FREE":
                ended.add(a["allocation_id"])
    sizes = [size for aid, (size, ptr) in born.items() if aid in ended and ptr not in pta]
    return len(sizes), sum(sizes), sizes


def host_lines(stdout, when="at stop()", dev="cpu"):
    """The console's "Host memory still allocated ..." header's figures and its site lines."""
    lines = stdout.splitlines()
    head = re.compile(r"^  Host memory still allocated %s on device %s: (\d+) block\(s\), (\d+) bytes, from (\d+) "
                      r"allocation site\(s\):$" % (re.escape(when), re.escape(dev)))
    (i,) = [i for i, l in enumerate(lines) if head.match(l)]
    n, b, s = map(int, head.match(lines[i]).groups())
    sites = []
    for l in lines[i + 1:]:
        if not l.startswith("    "):
            break
        sites.append(l)
    return n, b, s, sites


def js_human(b):
    """The page's human(): bytes in B/KiB/MiB/GiB."""
    units, v, i = ["B", "KiB", "MiB", "GiB", "TiB"], float(b), 0
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    if i == 0:
        return f"{b} B"
    return f"{v:.{0 if v >= 100 else 1 if v >= 10 else 2}f} {units[i]}"


TORCH_SCRIPT = """\
import torch, msmemscope
model = torch.nn.Linear(64, 64)
msmemscope.start()
keep = []
for i in range(4):
    x = torch.randn(32, 64)
    keep.append(model(x).detach().clone())
    msmemscope.step()
msmemscope.stop()
print("kept", len(keep))
"""


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("deferred_torch")
    (tmp / "d.py").write_text(TORCH_SCRIPT)
    p = run_cli(["--device=cpu", "--collect-mode=deferred", "--call-stack=python", "--analysis=leaks",
                 "--sinks=csv,html", "--output=out", "--", PY, "d.py"], tmp, env=ENV, check_rc=0)
    assert "kept 4" in p.stdout, p.stdout
    d = only(process_dirs(tmp / "out"))
    return tmp, p, d


def test_torch_deferred_run_counts_no_block_from_before_start(torch_run):
    tmp, p, d = torch_run
    n, b, _ = before_start_live(only(dump_files(d)))
    # `import torch`'s heap (tens of MiB, still allocated at stop()) is the
    # imports' heap, one block as in a run collecting from its first line
    # (test_python_import_fold.py); what is left from before the start is
    # the interpreter's and the model's own
    assert 0 < b < 4 << 20, (n, b)
    with open(only(dump_files(d)), newline="") as f:
        heap = [parse_attr(rec[9]) for rec in csv.reader(f) if rec[1] == "MALLOC" and "import:true" in rec[9]]
    assert len(heap) == 1 and int(heap[0]["size"]) > 20 << 20, heap
    # said once, on a line of its own, with the dump's counts
    assert [l for l in p.stdout.splitlines() if "Not judged on device" in l] == \
        [NOT_JUDGED.format(dev="cpu", n=n, b=b)], p.stdout
    assert p.stdout.count("before collection started") == 1, p.stdout
    # the step leaks: the clones kept at steps 2 and 3 (0 and 1 are warm-up)
    assert "====== SUMMARY: 0.015625 Mb(s) leaked in 2 allocation(s) ======\n" in p.stdout, p.stdout
    step = re.search(r"^  Leaked blocks on device cpu by site, largest first: (\d+) block\(s\), (\d+) bytes, ",
                     p.stdout, re.M)
    step_n, step_b = int(step.group(1)), int(step.group(2))
    assert (step_n, step_b) == (2, 2 * 32 * 64 * 4)
    # the host blocks still allocated at stop(): those made while collecting, every one with its site
    host_n, host_b, n_sites, sites = host_lines(p.stdout)
    assert host_b < 1 << 20, p.stdout
    assert len(sites) == n_sites and all(", allocated at: /" in l for l in sites), sites
    assert sum(int(re.match(r"    (\d+) block", l).group(1)) for l in sites) == host_n
    assert sum(int(re.match(r"    \d+ block\(s\), (\d+) bytes", l).group(1)) for l in sites) == host_b

    # summary.json: the same leaks, the blocks from before the start apart
    s = json.loads((d / "summary.json").read_text())
    assert s["leaks"] == {"bytes": step_b + host_b, "allocations": step_n + host_n, "exit_judged": True,
                          "not_judged_before_start": {"blocks": n, "bytes": b}}, s["leaks"]
    assert s["top_sites"][0] == {"kind": "leak", "device": "cpu", "blocks": 2, "bytes": 16384,
                                 "site": "allocated by: operator torch._ops.aten.clone.default, called from "
                                         f"{tmp}/d.py(7): <module>"}, s["top_sites"]
    assert all(t["kind"] in ("leak", "live_at_exit") and "before collection" not in t["site"] for t in s["top_sites"])
    assert sum(t["bytes"] for t in s["top_sites"] if t["kind"] == "live_at_exit") <= host_b


def test_torch_deferred_run_html_counts_no_block_from_before_start(torch_run):
    from test_html_truth import device, dom_of, page_data
    tmp, p, d = torch_run
    n, b, _ = before_start_live(only(dump_files(d)))
    s = json.loads((d / "summary.json").read_text())
    total_n, total_b = s["leaks"]["allocations"], s["leaks"]["bytes"]
    host_n, host_b, _, _ = host_lines(p.stdout)
    assert (total_n, total_b) == (2 + host_n, 16384 + host_b) and total_b < 1 << 20, s["leaks"]
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    assert data["leak_total"] == [total_n, total_b], data["leak_total"]
    assert data["leak_kinds"] == {"step": [2, 16384], "exit": [host_n, host_b]}, data["leak_kinds"]
    host = device(data, "cpu host memory")
    assert (host["leak_blocks"], host["leak_bytes"]) == (host_n, host_b)
    assert data["findings"]["leaks_not_judged"]["rows"] == [[
        "cpu", str(n), str(b), "allocated before collection started (no stack), still allocated at stop(); "
                               "in no leak total"]], data["findings"]["leaks_not_judged"]
    dom = dom_of(page, tmp)
    card = re.search(r'<div class="card" id="card-leaks"><div class="k">([^<]*)</div><div class="v">([^<]*)</div>', dom)
    assert card and card.groups() == ("leaked blocks (leaks analysis)",
                                      f"{total_n:,} \u00b7 {js_human(total_b)}"), card and card.groups()
    assert re.search(r"<h2>Leaks: %s blocks, %s \(\d+ rows\)</h2>" % (re.escape(f"{total_n:,}"),
                                                                      re.escape(js_human(total_b))), dom)
    # the blocks from before the start: one note under the Leaks title, not a table of their own
    assert re.findall(r'<p class="note not-judged">([^<]*)</p>', dom) == [
        f"Not judged on device cpu: {n:,} block(s), {js_human(b)} allocated before collection started (no stack), "
        "still allocated at stop(); in no leak total."], dom
    assert "Findings: leaks_not_judged" not in dom


def test_c_program_exact_counts(tmp_path):
    """analyzers_deferred_start: before start() it keeps a 12345-byte block
    (and libc its stdout buffer ...); while collecting it keeps one of 4321
    bytes. The latter is the only host block still allocated at stop()."""
    out = tmp_path / "out"
    p = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--call-stack=c", "--collect-mode=deferred",
                 f"--output={out}", "--", TEST_BIN / "analyzers_deferred_start"], tmp_path, check_rc=0)
    d = only(process_dirs(out))
    n, b, sizes = before_start_live(only(dump_files(d)))
    assert 12345 in sizes and 23456 not in sizes and 34567 not in sizes, sizes
    lines = p.stdout.splitlines()
    i = lines.index("  Host memory still allocated at stop() on device cpu: 1 block(s), 4321 bytes, from 1 "
                    "allocation site(s):")
    assert re.fullmatch(r"    1 block\(s\), 4321 bytes, allocated at: main\+0x[0-9a-f]+ at \S*/deferred_start\.c:\d+ "
                        r"in \S*/analyzers_deferred_start", lines[i + 1]), lines[i + 1]
    assert lines[i + 2] == NOT_JUDGED.format(dev="cpu", n=n, b=b), p.stdout
    assert p.stdout.count("before collection started") == 1, p.stdout
    assert "Detected memory leaks" not in p.stdout
    s = json.loads((d / "summary.json").read_text())
    assert s["leaks"] == {"bytes": 4321, "allocations": 1, "exit_judged": True,
                          "not_judged_before_start": {"blocks": n, "bytes": b}}, s["leaks"]
    assert [(t["kind"], t["device"], t["blocks"], t["bytes"]) for t in s["top_sites"]] == \
        [("live_at_exit", "cpu", 1, 4321)], s["top_sites"]
    # --analyze on the dump: the same analysis, the same lines
    off = run_cli(["--analyze=leaks", f"--input-path={d.name}"], out, check_rc=0)
    off_lines = off.stdout.splitlines()
    j = off_lines.index(lines[i])
    assert off_lines[j:j + 3] == lines[i:i + 3], off.stdout


def test_npu_driver_blocks_from_before_start(tmp_path):
    """npu_deferred_start (the simulated Ascend runtime): a 3 MiB HAL block
    allocated before start() and never freed is not judged; nothing else is
    still allocated, so no driver memory is reported and nothing leaked."""
    out = tmp_path / "out"
    p = run_cli(["--device=npu:0", "--events=alloc,free", "--analysis=leaks", "--collect-mode=deferred",
                 f"--output={out}", "--", TEST_BIN / "npu_deferred_start"], tmp_path,
                env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)}, check_rc=0)
    d = only(process_dirs(out))
    n, b, sizes = before_start_live(only(dump_files(d, device="0")), pool="HAL")
    assert (n, b) == (1, 3 << 20), sizes
    assert "Driver memory still allocated" not in p.stdout, p.stdout
    assert [l for l in p.stdout.splitlines() if "Not judged on device" in l] == \
        [NOT_JUDGED.format(dev="0", n=1, b=3 << 20)], p.stdout
    s = json.loads((d / "summary.json").read_text())
    assert s["leaks"] == {"bytes": 0, "allocations": 0, "exit_judged": True,
                          "not_judged_before_start": {"blocks": 1, "bytes": 3 << 20}}, s["leaks"]
    assert s["top_sites"] == []


def test_run_index_counts_no_block_from_before_start(tmp_path):
    """The table of a run's processes (and its index.html) reads the same
    report lines: each program's 4321 bytes, not with its blocks from before
    the start (about 16 KiB more)."""
    prog = TEST_BIN / "analyzers_deferred_start"
    p = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--call-stack=c", "--collect-mode=deferred",
                 "--output=out", "--", "bash", "-c", f"{prog}; {prog}"], tmp_path, check_rc=0)
    rows = re.findall(r"^  (\d+) +\d+ +- +exited with code 0 +(\S+ \S+) +cpu/HOST ", p.stdout, re.M)
    assert len(rows) == 2 and all(leaked == "4.2 KiB" for _, leaked in rows), p.stdout
    assert p.stdout.count("  Host memory still allocated at stop() on device cpu: 1 block(s), 4321 bytes, ") == 2
    assert len(re.findall(r"^  Not judged on device cpu: \d+ block\(s\), \d+ bytes allocated before collection "
                          r"started were still allocated at stop\(\) ", p.stdout, re.M)) == 2, p.stdout
    index = (tmp_path / "out" / "index.html").read_text()
    assert index.count("4.2 KiB in 1 allocation(s)") == 2, index
