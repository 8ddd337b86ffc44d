"""What the inefficient analysis marked, as the user sees it, on a real
PyTorch training loop under the CLI: the HTML report's "Inefficient memory"
section, the console line, summary.json and --analyze's write-back line all
count blocks (a block marked early_allocation and then late_deallocation is
annotated twice but is one block: once in the total, once in each kind's
row), and agree with the MALLOC rows the dump marks. Under --aggregate
(no rows) the console and summary.json are where the results are.
"""
import json
import re

import pytest

from conftest import dump_files, process_dirs, read_dump, run_cli
from sinks_common import only
from test_html_truth import dom_of, page_data

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = """\
import ctypes
import torch

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(32, 64)
y = torch.randint(0, 10, (32,))
keep = []
cptrs = []
for step in range(6):
    opt.zero_grad()
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    keep.append(torch.empty(3333))
    cptrs.append(libc.malloc(77771))
print("trained")
"""

ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}
KINDS = ("early_allocation", "late_deallocation", "temporary_idleness")


def run(tmp_path, args, out="out"):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    p = run_cli(["--device=cpu", "--call-stack=python", f"--output={out}"] + args + ["--", PY, script], tmp_path,
                env=ENV, check_rc=0)
    assert "trained" in p.stdout
    return p, only(process_dirs(tmp_path / out))


KIND = "(?:early_allocation|late_deallocation|temporary_idleness)"
KINDS_IN_ATTR = re.compile(r"inefficient_type:(%s(?:,%s)*)" % (KIND, KIND))


def marked(rows):
    """Per marked block (its MALLOC row): (size, kinds), from the dump. (A
    block of two kinds says `inefficient_type:early_allocation,late_deallocation`
    in its Attr, the comma unquoted, as upstream writes it.)"""
    out = {}
    for r in rows:
        m = KINDS_IN_ATTR.search(r["Attr"]) if r["Event"] == "MALLOC" else None
        if m:
            out[r["ID"]] = (int(r["attr"]["size"]), m.group(1).split(","))
    return out


def expected_line(blocks, judged):
    total = sum(size for size, _ in blocks.values())
    parts = []
    for k in KINDS:
        of_kind = [size for size, kinds in blocks.values() if k in kinds]
        if of_kind:
            parts.append(f"{k} {len(of_kind)} block(s), {sum(of_kind)} bytes")
    return (f"inefficient: {len(blocks)} block(s), {total} bytes marked on device cpu, of {judged} block(s) judged: "
            + "; ".join(parts))


def expected_summary(blocks):
    kinds = {}
    for k in KINDS:
        of_kind = [size for size, kinds_ in blocks.values() if k in kinds_]
        if of_kind:
            kinds[k] = {"blocks": len(of_kind), "bytes": sum(of_kind)}
    return {"blocks": len(blocks), "bytes": sum(size for size, _ in blocks.values()), "kinds": kinds}


@pytest.fixture(scope="module")
def html_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ineff_html")
    p, d = run(tmp, ["--analysis=leaks,decompose,inefficient", "--sinks=csv,html"])
    rows = read_dump(only(dump_files(d)))
    blocks = marked(rows)
    judged = sum(1 for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA")
    # the loop has blocks of both kinds: annotated twice, one block each
    assert any(len(kinds) == 2 for _, kinds in blocks.values()), blocks
    return tmp, p, d, blocks, judged


def test_console_and_summary_count_blocks(html_run):
    tmp, p, d, blocks, judged = html_run
    lines = [l for l in p.stdout.splitlines() if l.startswith("inefficient: ")]
    assert lines == [expected_line(blocks, judged)]
    assert json.loads((d / "summary.json").read_text())["inefficient"] == expected_summary(blocks)


def test_html_shows_the_marked_blocks(html_run):
    tmp, p, d, blocks, judged = html_run
    page = only(d.glob("report_*.html"))
    ie = page_data(page)["inefficient"]
    want = expected_summary(blocks)
    assert (ie["ran"], ie["blocks"], ie["bytes"]) == (True, want["blocks"], want["bytes"])
    assert ie["kinds"] == {k: [v["blocks"], v["bytes"]] for k, v in want["kinds"].items()}
    assert [dev["label"] for dev in ie["devices"]] == ["cpu framework pools"]
    # the largest blocks, with their kinds and their Python stack
    by_size = sorted(blocks.items(), key=lambda kv: (-kv[1][0], int(kv[0])))
    assert [(b["event_id"], b["size"], b["kinds"].split(",")) for b in ie["largest"]] == \
        [(int(i), size, kinds) for i, (size, kinds) in by_size[:100]]
    assert all(re.search(r"train\.py\(\d+\): <module>", b["stack"]) for b in ie["largest"]), ie["largest"][:3]
    # what the page shows
    dom = dom_of(page, tmp)
    assert 'id="no-inefficient"' not in dom
    n, total = want["blocks"], want["bytes"]
    assert re.search(r'<h2 id="inefficient-title">Inefficient memory: %d blocks, [^<]+</h2>' % n, dom), \
        re.findall(r'<h2 id="inefficient-title">.*?</h2>', dom)
    kinds_rows = re.search(r'<table id="table-inefficient-kinds" data-rows="(\d+)">', dom)
    assert kinds_rows and int(kinds_rows.group(1)) == 1 + len(want["kinds"])
    assert re.search(r'<td>cpu framework pools</td><td>all kinds</td><td class="num">%s</td>' % f"{n:,}", dom)
    for k, v in want["kinds"].items():
        assert re.search(r'<td>cpu framework pools</td><td>%s</td><td class="num">%s</td>' % (k, f"{v['blocks']:,}"),
                         dom), k
    blocks_rows = re.search(r'<table id="table-inefficient-blocks" data-rows="(\d+)">', dom)
    assert blocks_rows and int(blocks_rows.group(1)) == min(n, 100)


def test_aggregate_says_what_was_marked(tmp_path, html_run):
    # no rows under --aggregate: the console and summary.json carry it, as
    # in the run with rows (the same loop marks the same blocks)
    _, _, _, blocks, judged = html_run
    p, d = run(tmp_path, ["--analysis=leaks,decompose,inefficient", "--sinks=html", "--aggregate"])
    assert not list(d.glob("device_cpu/dump/*.csv"))
    lines = [l for l in p.stdout.splitlines() if l.startswith("inefficient: ")]
    assert lines == [expected_line(blocks, judged)]
    assert json.loads((d / "summary.json").read_text())["inefficient"] == expected_summary(blocks)
    assert page_data(only(d.glob("report_*.html")))["inefficient"]["blocks"] == len(blocks)


def test_without_the_analysis_summary_says_null_and_the_page_says_so(tmp_path):
    p, d = run(tmp_path, ["--analysis=decompose", "--sinks=html"])
    assert not [l for l in p.stdout.splitlines() if l.startswith("inefficient")]
    assert json.loads((d / "summary.json").read_text())["inefficient"] is None
    ie = page_data(only(d.glob("report_*.html")))["inefficient"]
    assert (ie["ran"], ie["blocks"]) == (False, 0)


def test_analyze_writes_one_result_per_marked_block(tmp_path, html_run):
    # a dump with accesses, recorded without the inefficient analysis
    blocks = html_run[3]
    p, d = run(tmp_path, ["--analysis=leaks", "--events=alloc,free,access,launch"], out="plain")
    dump = only(dump_files(d))
    assert not marked(read_dump(dump))
    rel = dump.relative_to(tmp_path)
    off = run_cli(["--analyze=inefficient", f"--input={rel}", "--output=off"], tmp_path, check_rc=0)
    rows = read_dump(dump)
    now = marked(rows)
    assert sorted(now.values()) == sorted(blocks.values())
    judged = sum(1 for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA")
    out = off.stdout.splitlines()
    assert expected_line(now, judged) in out
    assert f"msmemscope: wrote {len(now)} result(s) back into {rel}" in out
