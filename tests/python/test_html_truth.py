"""The HTML report answers from the same analyses as the console (issue #27
items 1 and 7), on a real PyTorch training script run under the CLI: a small
model trained with AdamW whose loop keeps every step's loss (and its graph)
in a list, so that each step leaks.

- the leaked view (flame graph, card, Leaks title) shows exactly the blocks
  and bytes of the leak analysis's findings (as the db sink wrote them, and
  as upstream's SUMMARY line counts the step leaks);
- without the leak analysis the page says so and offers "Live at the end"
  for what it is;
- the timeline's series are the decomposition's owners (PTA@weight,
  PTA@gradient ... as its owners table lists them);
- the page reads well: the default device is the framework pools (the most
  memory with a stack at the peak), flame labels without folders, wrapper
  frames folded; screenshots in headless Chromium.
"""
import html
import json
import re
import shutil
import sqlite3

import pytest

from conftest import process_dirs, run_cli
from sinks_common import ARTIFACTS, only, render

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
x = torch.randn(32, 256)
y = torch.randn(32, 8)
for step in range(8):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss)  # keeps every step's loss and its graph alive: a leak
# host memory the program never frees, four blocks at one line (what torch keeps
# until exit is its one-time set-up, which the leak analysis leaves out)
import ctypes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
kept = [libc.malloc(1000 + i) for i in range(4)]
print("trained", len(losses))
"""

ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}


def page_data(page):
    return json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])


def dom_of(page, tmp_path, screenshot=None):
    return render(page, tmp_path, screenshot, window=(1400, 5000))


def run(tmp_path, analysis, sinks):
    script = tmp_path / "train_leak.py"
    script.write_text(SCRIPT)
    p = run_cli(["--device=cpu", "--call-stack=python", f"--analysis={analysis}", f"--sinks={sinks}", "--output=out",
                 "--", PY, script], tmp_path, env=ENV, check_rc=0)
    assert "trained 8" in p.stdout
    return p, only(process_dirs(tmp_path / "out"))


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html_truth")
    p, d = run(tmp, "leaks,decompose", "html,db")
    return tmp, p, d


def db_findings(d, table):
    db = only(list(d.glob("device_*/dump/*.db")) or list(d.glob("**/*.db")))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [json.loads(c) for (c,) in con.execute('SELECT cols FROM msms_findings WHERE "table"=? ORDER BY seq',
                                                       (table,))]
    finally:
        con.close()


def device(data, label):
    return only([d for d in data["devices"] if d["label"] == label])


def test_leaked_view_is_the_leak_analysis(leak_run):
    tmp, p, d = leak_run
    data = page_data(only(d.glob("report_*.html")))
    leaks = db_findings(d, "leaks")
    step = [f for f in leaks if f["kind"] == "step"]
    exit_ = [f for f in leaks if f["kind"] == "exit"]
    assert len(step) + len(exit_) == len(leaks)
    # the loss of every judged step (2..7) leaked, as upstream's summary says
    m = re.search(r"^====== SUMMARY: [\d.]+ Mb\(s\) leaked in (\d+) allocation\(s\) ======$", p.stdout, re.M)
    assert m and int(m.group(1)) == len(step) == 6, p.stdout
    step_bytes = sum(int(f["size"]) for f in step)
    exit_blocks = sum(int(f["count"]) for f in exit_)
    exit_bytes = sum(int(f["size"]) for f in exit_)
    assert exit_blocks > len(exit_)  # host blocks are reported per site: a row is many blocks

    assert data["leaks_ran"] is True
    assert data["leak_total"] == [len(step) + exit_blocks, step_bytes + exit_bytes]
    assert data["leak_unplaced"] == [0, 0]
    assert data["leak_kinds"] == {"step": [len(step), step_bytes], "exit": [exit_blocks, exit_bytes]}
    # framework pools: the step leaks, although Python freed them at teardown
    fw = device(data, "cpu framework pools")
    assert fw["final"] == 0 and fw["leaked_by"] == "leaks"
    assert (fw["leak_blocks"], fw["leak_bytes"]) == (len(step), step_bytes)
    assert sum(f[3] for f in fw["flame"]) + fw["flame_rest"][2] == step_bytes
    # ... on the line of the program that made them
    site = only([f[0] for f in fw["flame"] if f[3]])
    path = [data["frames"][i] for i in data["site_paths"][site]]
    line = 1 + [i for i, t in enumerate(SCRIPT.splitlines()) if "mse_loss(" in t][0]
    assert re.fullmatch(r".*/train_leak\.py\(%d\): <module>" % line, path[0]) and path[-1].endswith("mse_loss"), path
    # host memory: the blocks still allocated at exit, with the same bytes
    host = device(data, "cpu host memory")
    assert (host["leak_blocks"], host["leak_bytes"]) == (exit_blocks, exit_bytes)
    assert sum(f[3] for f in host["flame"]) + host["flame_rest"][2] == exit_bytes

    dom = dom_of(only(d.glob("report_*.html")), tmp, ARTIFACTS / "report_torch_leaks_1400.png")
    # the card counts blocks, not rows (a host row is a site of many blocks)
    card = re.search(r'<div class="card" id="card-leaks"><div class="k">([^<]*)</div><div class="v">([^<]*)</div>', dom)
    assert card and card.group(1) == "leaked blocks (leaks analysis)", dom[:3000]
    assert card.group(2).startswith(f"{len(step) + exit_blocks:,} \u00b7 ")
    assert re.search(r"<h2>Leaks: %s blocks, [^<]* \(%d rows\)</h2>" % (re.escape(f"{len(step) + exit_blocks:,}"), len(leaks)),
                     dom)
    assert '>Leaked (leaks analysis)</button>' in dom


def test_the_rows_card_counts_the_rows_the_db_holds(leak_run):
    # the card is the page's own row count, the db's of the same run; the
    # console's "events" counts what the program sent, a different number
    # (frees of blocks from before collection are not rows; START_TRACE and
    # the end's FREEs are the profiler's): it is not called "events" here
    tmp, p, d = leak_run
    db = only(list(d.glob("device_*/dump/*.db")))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (rows,) = con.execute("SELECT count(*) FROM memscope_dump").fetchone()
    finally:
        con.close()
    data = page_data(only(d.glob("report_*.html")))
    assert data["rows"] == rows
    # the page was drawn from more: the operators' accesses decompose asked for
    # (--events does not write them)
    assert data["events"] == rows + data["kinds"]["ACCESS"] and data["kinds"]["ACCESS"] > 0
    dom = dom_of(only(d.glob("report_*.html")), tmp)
    card = re.search(r'<div class="card" id="card-rows"><div class="k">([^<]*)</div><div class="v">([^<]*)</div>', dom)
    assert card and card.groups() == ("rows", f"{rows:,}"), dom[:3000]
    events = int(re.search(r"^  events: (\d+), dropped: 0$", p.stdout, re.M).group(1))
    assert events != rows and ">events<" not in dom


def test_imports_heap_is_as_many_blocks_as_it_stands_for(leak_run):
    """Python's import-time heap is one row for many blocks (Attr blocks:
    framework/agent/import_fold.h): the page lists it under its own name and
    counts the blocks that row stands for, as the console and the leak
    analysis do, not one."""
    tmp, p, d = leak_run
    data = page_data(only(d.glob("report_*.html")))
    host = device(data, "cpu host memory")
    db = only(list(d.glob("device_*/dump/*.db")) or list(d.glob("**/*.db")))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        attrs = [a for (a,) in con.execute("""SELECT Attr FROM memscope_dump WHERE Event='MALLOC' AND "Event Type"='HOST'""")
                 if re.search(r'"?import"?:"?true', a)]
    finally:
        con.close()
    heaps = {(int(re.search(r'"?blocks"?:"?(\d+)', a).group(1)), int(re.search(r'"?size"?:"?(\d+)', a).group(1)))
             for a in attrs}
    assert heaps, "no row of the imports' heap"
    (row,) = [r for r in host["at_peak"] if r["stack"] == "(no stack) while importing Python modules"]
    assert (row["count"], row["bytes"]) in heaps, (row, sorted(heaps)[-3:])
    assert row["count"] > 10000  # import torch: ~300 k blocks, not one
    m = re.search(r"^  cpu/HOST: Python imports left up to (\d+) block\(s\)", p.stdout, re.M)
    assert m and int(m.group(1)) == max(b for b, _ in heaps), p.stdout
    # the blocks live at the end count it the same way: the leak analysis's exit blocks are among them,
    # with those its built-in list took out (the imports' heap: one-time set-up)
    exit_blocks = sum(int(f["count"]) for f in db_findings(d, "leaks") if f["kind"] == "exit")
    left_out = re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \((\d+) block\(s\), \d+ bytes\): \d+ by "
                         r"the built-in list of one-time set-up \(the interpreter, the imports' heap, ", p.stdout, re.M)
    assert left_out and int(left_out.group(1)) > 10000, p.stdout
    exit_blocks += int(left_out.group(1))
    assert exit_blocks <= host["live"] < exit_blocks + 1000, (host["live"], exit_blocks)


def test_default_device_labels_and_folded_wrappers(leak_run):
    """The page opens the flame graph on the device with the most memory that
    has a stack at its peak (the framework pools, not the host whose peak
    is import memory without stacks); labels are file names; the optimizer's
    wrapper and decorator frames are folded into their caller."""
    tmp, p, d = leak_run
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    fw, host = device(data, "cpu framework pools"), device(data, "cpu host memory")
    assert fw["attributed"] == fw["peak"] and host["attributed"] < fw["attributed"] < host["peak"]
    dom = dom_of(page, tmp)
    flame = re.search(r'<canvas id="flame"[^>]*>', dom).group(0)
    attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', flame))
    assert attrs["data-device"] == "cpu framework pools" and attrs["data-measure"] == "peak"
    assert int(attrs["data-total"]) == fw["peak"]
    assert int(attrs["data-folded"]) > 0  # optimizer.py wrapper, grad_mode.py decorate_context, module _call_impl
    assert 'id="flame-fold" checked="checked"' in dom
    # the full frames stay in the data (the tooltip shows them)
    assert any(f.endswith("torch/optim/optimizer.py(140): wrapper") or f.endswith("): wrapper") for f in data["frames"])


def test_timeline_series_are_the_decomposition_owners(leak_run):
    tmp, p, d = leak_run
    data = page_data(only(d.glob("report_*.html")))
    owners = {(o["device"], o["owner"]): o for o in db_findings(d, "owners")}
    fw = device(data, "cpu framework pools")
    pta = {name for (dev, name) in owners if dev == "cpu" and name.startswith("PTA")}
    assert {"PTA@weight", "PTA@gradient", "PTA@optimizer_state", "PTA@ops@aten"} <= pta, pta
    assert set(fw["cats"]) == pta
    assert device(data, "cpu host memory")["cats"] == ["HOST"]
    # weights (fc1 and fc2, with their biases) are the weight series at the
    # device's peak, which falls in an optimizer step, as are the gradients
    at = max(range(len(fw["t"])), key=lambda i: sum(v[i] for v in fw["v"]))
    series = {c: fw["v"][k][at] for k, c in enumerate(fw["cats"])}
    params = (256 * 512 + 512 + 512 * 8 + 8) * 4
    assert series["PTA@weight"] >= params and series["PTA@gradient"] >= params
    assert series["PTA@weight"] == int(owners[("cpu", "PTA@weight")]["peak_bytes"])
    assert series["PTA@gradient"] == int(owners[("cpu", "PTA@gradient")]["peak_bytes"])


def test_owner_series_count_a_block_under_the_owner_it_ended_with(leak_run):
    # A gradient is made inside an operator (ops@aten) and tagged "gradient"
    # after backward(). The decomposition's table, the block's row in the
    # dump and the page's series count it as a gradient from its MALLOC on:
    # the series once moved its bytes only from the tag on, so ops@aten's
    # curve rose above the table's ops@aten peak (2.2 MB against 1.1 MB).
    tmp, p, d = leak_run
    fw = device(page_data(only(d.glob("report_*.html"))), "cpu framework pools")
    owners = {o["owner"]: int(o["peak_bytes"]) for o in db_findings(d, "owners") if o["device"] == "cpu"}
    # the points are the states at their buckets' highest totals: no owner's
    # point is above its peak, and the largest owners reach it
    for k, cat in enumerate(fw["cats"]):
        assert max(fw["v"][k]) <= owners[cat], (cat, max(fw["v"][k]), owners)
    for cat in ("PTA@weight", "PTA@gradient"):
        assert max(fw["v"][fw["cats"].index(cat)]) == owners[cat], (cat, owners)
    # and the table's figures are the dump's, read again
    shutil.copytree(d, tmp / "again")
    off = run_cli(["--analyze=decompose", "--input-path=again"], tmp, check_rc=0)
    table = dict(re.findall(r"^  (PTA\S*) +-?\d+ +(\d+) +\d+$", off.stdout, re.M))
    assert {o: int(v) for o, v in table.items()} == {o: v for o, v in owners.items() if o.startswith("PTA")}, off.stdout


def test_without_the_leak_analysis_the_page_says_so(tmp_path):
    p, d = run(tmp_path, "decompose", "html")
    page = only(d.glob("report_*.html"))
    data = page_data(page)
    assert data["leaks_ran"] is False and "leaks" not in data["findings"]
    fw = device(data, "cpu framework pools")
    assert fw["leaked_by"] == "end" and "leak_blocks" not in fw
    host = device(data, "cpu host memory")
    assert sum(f[3] for f in host["flame"]) + host["flame_rest"][2] == host["final"]  # what it is: live at the end
    dom = dom_of(page, tmp_path)
    assert ">Live at the end</button>" in dom and ">Leaked (leaks analysis)</button>" not in dom
    assert re.search(r'id="card-leaks"><div class="k">leaks</div><div class="v">not analysed \(--analysis=leaks\)</div>', dom)
    assert '<p class="empty" id="no-leaks">The leaks analysis did not run (--analysis=leaks).</p>' in dom
