"""The oom and inefficient analyses on real PyTorch CPU programs, checked
against what the program itself knows (its tensors' data_ptr() and sizes):

* oom: the OOM_RecentAlloc/OOM_TopAlloc rows list blocks. The imports' heap
  (the host blocks Python's imports left, written as one shadow MALLOC with
  Attr import:true at a made-up address, re-written as the imports change) is
  no block: listed, it was the largest "allocation" of every CLI run, at an
  address nothing has, and the most recent one after any import. A block
  made before start() (written at start() as a shadow MALLOC) is among the
  largest, never among the most recent: when it was allocated is not known.
* inefficient: a block's marks say how the program used it while collection
  was on. A block that was there before start() has no known allocation; a
  block still live at stop() (a weight, its gradient, the optimizer's state)
  was not freed at all. Neither is judged (upstream's live analyzer skips
  shadow events: csrc/analysis/inefficient_analyzer.cpp), while a tensor
  freed late inside the range still is.
"""
import os
import re
import subprocess

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
ENV = {"PYTHONPATH": "", "LD_PRELOAD": ""}

OOM_SCRIPT = """\
import fractions, decimal
import torch
keep = {i: torch.empty((i + 1) * 100000, dtype=torch.uint8) for i in range(5)}
big = torch.empty(3000000, dtype=torch.uint8)
del keep[2]
small = torch.empty(10, dtype=torch.uint8)
import statistics, json  # the imports' heap changes right before the failure
try:
    torch.empty(1 << 44, dtype=torch.uint8)
except RuntimeError as e:
    print("OOM:", str(e).splitlines()[0])
print("TOP", big.data_ptr(), keep[4].data_ptr(), keep[3].data_ptr())
"""


def test_oom_lists_blocks_not_the_imports_heap(tmp_path):
    (tmp_path / "oom.py").write_text(OOM_SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=oom:3", "--output=out", "--", PY, "oom.py"], tmp_path, env=ENV,
                check_rc=0)
    assert "DefaultCPUAllocator: can't allocate memory" in p.stdout
    [d] = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(d)[0])
    folded = {r["Ptr"] for r in rows if r["Event"] == "MALLOC" and r["attr"].get("import") == "true"}
    assert folded, "the run has an imports' heap block"
    recent = [r["attr"] for r in rows if r["Event"] == "OOM_DETAIL" and r["Event Type"] == "OOM_RECENT_ALLOC"]
    top = [r["attr"] for r in rows if r["Event"] == "OOM_DETAIL" and r["Event Type"] == "OOM_TOP_ALLOC"]
    assert len(recent) == 3 and len(top) == 3
    for a in recent + top:
        assert int(a["ptr"], 16) not in {int(f, 16) for f in folded}, a
    # the three largest live blocks: the program's own tensors, largest first
    want = [int(x) for x in re.search(r"^TOP (\d+) (\d+) (\d+)$", p.stdout, re.M).groups()]
    assert [(int(a["ptr"], 16), int(a["size"]), a["pool"]) for a in top] == \
        [(want[0], 3000000, "PTA"), (want[1], 500000, "PTA"), (want[2], 400000, "PTA")]


INEFF_SCRIPT = """\
import sys
import torch
import msmemscope

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
y = torch.randint(0, 10, (32,))
before = torch.ones(50000)          # made before start(), used in the range, kept
msmemscope.config(device="cpu", analysis="inefficient", output=sys.argv[1])
msmemscope.start()
late_ptrs = []
for step in range(4):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    before.add_(1.0)
    late = torch.ones(70000 + step)  # used once, then kept while others are allocated
    late.mul_(2.0)
    late_ptrs.append(late.data_ptr())
    other = torch.ones(1000)
    del late                         # freed late, inside the range
    msmemscope.step()
msmemscope.stop()
kept = [p.data_ptr() for p in model.parameters()] + [p.grad.data_ptr() for p in model.parameters()]
kept += [v.data_ptr() for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
kept.append(before.data_ptr())
print("KEPT", " ".join(map(str, kept)))
print("LATE", " ".join(map(str, late_ptrs)))
"""


@pytest.fixture(scope="module")
def ineff_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ineff_truth")
    (tmp / "train.py").write_text(INEFF_SCRIPT)
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, "train.py", str(tmp / "out")], cwd=str(tmp), env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    [d] = process_dirs(tmp / "out")
    kept = {int(x) for x in re.search(r"^KEPT (.*)$", p.stdout, re.M).group(1).split()}
    late = [int(x) for x in re.search(r"^LATE (.*)$", p.stdout, re.M).group(1).split()]
    return p, read_dump(dump_files(d)[0]), kept, late


KIND = "(?:early_allocation|late_deallocation|temporary_idleness)"
KINDS_IN_ATTR = re.compile(r"inefficient_type:(%s(?:,%s)*)" % (KIND, KIND))


def _kinds(r):
    """A MALLOC row's marks (`inefficient_type:early_allocation,late_deallocation`,
    the comma unquoted, as upstream writes it)."""
    m = KINDS_IN_ATTR.search(r["Attr"])
    return m.group(1).split(",") if m else []


def _marked(rows):
    return {r["ID"]: r for r in rows if r["Event"] == "MALLOC" and _kinds(r)}


def test_blocks_live_at_stop_or_from_before_start_are_not_judged(ineff_run):
    p, rows, kept, late = ineff_run
    assert len(kept) == 4 + 4 + 12 + 1  # parameters, gradients, Adam's step/exp_avg/exp_avg_sq, `before`
    live_at_stop = {r["attr"]["allocation_id"] for r in rows
                    if r["Event"] == "FREE" and r["attr"].get("shadow") == "true"}
    marked = _marked(rows).values()
    # a block there before start() (its MALLOC written at start(), shadow):
    # when it was allocated is not known, nothing is said of it
    before = [(r["ID"], r["Ptr"], _kinds(r)) for r in marked if r["attr"].get("shadow") == "true"]
    assert not before, before
    # a block still live at stop() was not freed, late or otherwise (it
    # keeps what it earned while used: Adam's state, made in its first
    # step before the update's temporaries come and go, is early)
    late_at_stop = [(r["ID"], r["Ptr"], _kinds(r)) for r in marked
                    if r["attr"]["allocation_id"] in live_at_stop and "late_deallocation" in _kinds(r)]
    assert not late_at_stop, late_at_stop
    # the kept tensors themselves, by the program's own pointers: the
    # parameters and gradients made before start(), the optimizer's state in
    # the range, all live at stop()
    kept_rows = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"
                 and int(r["Ptr"], 16) in kept and r["attr"]["allocation_id"] in live_at_stop]
    assert {int(r["Ptr"], 16) for r in kept_rows} == kept
    assert not [r["ID"] for r in kept_rows if "late_deallocation" in _kinds(r)]
    assert not [r["ID"] for r in kept_rows if r["attr"].get("shadow") == "true" and _kinds(r)]


def test_a_tensor_freed_late_in_the_range_is_still_marked(ineff_run):
    p, rows, kept, late = ineff_run
    marked = _marked(rows).values()
    for ptr, n in zip(late, range(4)):
        [r] = [r for r in marked if int(r["Ptr"], 16) == ptr and int(r["attr"]["size"]) == (70000 + n) * 4]
        assert "late_deallocation" in _kinds(r), r["Attr"]
    # the console counts what the rows say
    blocks = len(marked)
    size = sum(int(r["attr"]["size"]) for r in marked)
    line = [l for l in p.stdout.splitlines() if l.startswith("inefficient: ")]
    assert len(line) == 1 and line[0].startswith(f"inefficient: {blocks} block(s), {size} bytes marked on device cpu")


TWO_RANGES = """\
import torch, msmemscope
msmemscope.start()
a = torch.ones(300000)
a.add_(1.0)
pa = a.data_ptr()
msmemscope.stop()
del a
b = torch.ones(300000)          # made while collection is off, at a's address
pb = b.data_ptr()
msmemscope.start()
s = torch.zeros(4); t = torch.ones(4)
for i in range(30):
    s.add_(t)
b.add_(t.sum())                  # b's first access of the second range
msmemscope.stop()
print("PTRS", pa, pb)
"""


def test_two_ranges_a_block_freed_while_off_gets_none_of_the_next_ones_accesses(tmp_path):
    # start() writes the FREE of a (freed while off) and the MALLOC of b
    # (made while off) as shadow rows; b's accesses are b's, not a's
    (tmp_path / "two.py").write_text(TWO_RANGES)
    env = dict(ENV, MALLOC_MMAP_THRESHOLD_="131072")  # fixed: a and b are mmaps, b where a was
    p = run_cli(["--device=cpu", "--collect-mode=deferred", "--analysis=inefficient",
                 "--events=alloc,free,access,launch", "--plugin-option=inefficient.idle_threshold=20",
                 "--output=out", "--", PY, "two.py"], tmp_path, env=env, check_rc=0)
    pa, pb = (int(x) for x in re.search(r"^PTRS (\d+) (\d+)$", p.stdout, re.M).groups())
    assert pa == pb
    [d] = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(d)[0])
    at = [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "PTA" and int(r["Ptr"], 16) == pa]
    assert [(r["Event"], r["attr"].get("shadow")) for r in at] == \
        [("MALLOC", None), ("FREE", "true"), ("MALLOC", "true"), ("FREE", "true")]
    assert not _kinds(at[0]) and not _kinds(at[2]), (at[0]["Attr"], at[2]["Attr"])
    assert "inefficient: no block marked on device cpu, of " in p.stdout


OOM_AFTER_START = """\
import sys
import torch, msmemscope
old = [torch.empty(100000 * (i + 1), dtype=torch.uint8) for i in range(3)]   # before start()
msmemscope.config(device="cpu", analysis="oom:50", output=sys.argv[1])
msmemscope.start()
new = torch.empty(5000, dtype=torch.uint8)
try:
    torch.empty(1 << 44, dtype=torch.uint8)
except RuntimeError:
    pass
msmemscope.stop()
print("OLD", " ".join(str(t.data_ptr()) for t in old))
print("NEW", new.data_ptr())
"""


def test_oom_right_after_start_does_not_call_older_blocks_recent(tmp_path):
    # the tensors made before start() are written at start() as shadow
    # MALLOCs: among the largest blocks, but not allocated recently
    (tmp_path / "oom.py").write_text(OOM_AFTER_START)
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, "oom.py", str(tmp_path / "out")], cwd=str(tmp_path), env=e, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    old = [int(x) for x in re.search(r"^OLD (.*)$", p.stdout, re.M).group(1).split()]
    new = int(re.search(r"^NEW (\d+)$", p.stdout, re.M).group(1))
    [d] = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(d)[0])
    recent = [int(r["attr"]["ptr"], 16) for r in rows if r["Event Type"] == "OOM_RECENT_ALLOC"]
    top = [(int(r["attr"]["ptr"], 16), int(r["attr"]["size"])) for r in rows if r["Event Type"] == "OOM_TOP_ALLOC"]
    assert new in recent
    assert not set(old) & set(recent), (old, recent)
    assert top[:3] == [(old[2], 300000), (old[1], 200000), (old[0], 100000)]
