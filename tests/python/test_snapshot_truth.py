"""take_snapshot()'s SNAPSHOT rows against torch's own truth in a PyTorch
CPU training loop, under the CLI and with the Python API alone: the figures
(`allocated` = the bytes of the tensors torch holds, summed from their
storages by the script at each point), the names, their order among the
STEP rows, the Start/End rows of the context manager and decorator, the
exact messages for bad arguments, snapshots before start() and after
stop() (a snapshot before the first start() said allocated:0 with a model
live: the pool's hooks go in at start()), and after finish() (a snapshot
then was dropped without a word)."""
import json
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, clean_env, dump_files, process_dirs, read_dump

pytest.importorskip("torch")

PY = "/usr/bin/python3"
MiB = 1 << 20

# Prints TRUTH <json> before each snapshot: the bytes of what torch holds,
# each storage once (parameters, gradients, Adam's state, the batch, the
# loss and logits, a 1 MiB tensor kept across quiet0 only).
TRAIN = '''
import json, os
import torch
import msmemscope

if os.environ.get("PROBE_API"):
    msmemscope.config(device="cpu", output="out")
    msmemscope.start()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 256)
y = torch.randint(0, 10, (64,))

def nb(ts):
    seen, n = set(), 0
    for t in ts:
        if t is not None and t.storage().data_ptr() not in seen:
            seen.add(t.storage().data_ptr())
            n += t.storage().nbytes()
    return n

def point(name, *live):
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    held = nb(params + [p.grad for p in params] + state + [x, y] + list(live))
    print("TRUTH", json.dumps({"name": name, "held": held, "params": nb(params)}), flush=True)
    msmemscope.take_snapshot(name=name)

for it in range(2):
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    point(f"fwd{it}", out, loss)
    loss.backward()
    point(f"bwd{it}", out, loss)
    opt.step()
    point(f"opt{it}", out, loss)
    opt.zero_grad(set_to_none=True)
    del out, loss
    keep = torch.empty(MiB, dtype=torch.uint8) if it == 0 else None
    point(f"quiet{it}", keep)
    del keep
    msmemscope.step()
if os.environ.get("PROBE_API"):
    msmemscope.stop()
'''.replace("MiB", str(MiB))

NAMES = ["fwd0", "bwd0", "opt0", "quiet0", "fwd1", "bwd1", "opt1", "quiet1"]


def run(tmp_path, body, cli=None, **env):
    (tmp_path / "prog.py").write_text(textwrap.dedent(body))
    cmd = [PY, "prog.py"]
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--output=out", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=clean_env(**env), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    (d,) = process_dirs(tmp_path / "out")
    (dump,) = dump_files(d)
    return p, d, read_dump(dump)


def meminfo_total():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def check_training(p, d, rows):
    truth = [json.loads(line[6:]) for line in p.stdout.splitlines() if line.startswith("TRUTH ")]
    assert [t["name"] for t in truth] == NAMES
    snaps = [r for r in rows if r["Event"] == "SNAPSHOT"]
    assert [s["Name"] for s in snaps] == NAMES, [s["Name"] for s in snaps]
    by = {s["Name"]: s for s in snaps}
    for t in truth:
        s = by[t["name"]]
        a = {k: v for k, v in s["attr"].items()}
        assert s["Event Type"] == "SNAPSHOT" and s["Device Id"] == "cpu" and s["Ptr"] == "N/A", s
        # upstream's keys in its order (csrc/analysis/dump.cpp), then ours
        assert list(a)[:8] == ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free",
                               "device_rate", "reserved_rate"], a
        allocated = int(a["allocated"])
        if t["name"].startswith("fwd"):
            # the graph's saved tensors (ReLU's output, log_softmax's...) too
            assert allocated >= t["held"] + 64 * 512 * 4, (t, a)
        else:
            assert allocated == t["held"], (t, a)
        assert int(a["reserved"]) == allocated  # the CPU pool caches nothing
        assert int(a["max_allocated"]) == int(a["max_reserved"]) >= allocated
        assert a["reserved_rate"] == "100.000000"
        total, free = int(a["total"]), int(a["free"])
        assert total == meminfo_total()
        assert a["device_rate"] == "%f" % (100.0 * (total - free) / total)
    held = {t["name"]: t["held"] for t in truth}
    assert held["quiet0"] - held["quiet1"] == MiB
    # the peak the pool saw (Adam's first step) is the run's PTA peak
    pools = json.loads((d / "summary.json").read_text())["pools"]
    assert int(by["quiet1"]["attr"]["max_allocated"]) == pools["cpu/PTA"]["peak_bytes"]
    # IDs in time order, each snapshot after the rows of what it saw
    ids = [int(r["ID"]) for r in rows]
    assert ids == sorted(ids)
    ts = [int(r["Timestamp(ns)"]) for r in rows]
    assert ts == sorted(ts)
    return rows


def order(rows):
    return [r["Name"] if r["Event"] == "SNAPSHOT" else f'{r["Event Type"]} {r["Name"]}'
            for r in rows if r["Event"] == "SNAPSHOT" or r["Event Type"] in ("STEP", "START_TRACE", "STOP_TRACE")]


def test_training_loop_snapshots_under_the_cli(tmp_path):
    p, d, rows = run(tmp_path, TRAIN, cli=["--device=cpu", "--call-stack=python"])
    check_training(p, d, rows)
    # the optimizer marks steps until the script's first step() call (README)
    assert order(rows) == ["START_TRACE N/A", "fwd0", "bwd0", "STEP 1", "opt0", "quiet0", "fwd1", "bwd1",
                           "opt1", "quiet1", "STEP 2"]


def test_training_loop_snapshots_with_the_api_alone(tmp_path):
    p, d, rows = run(tmp_path, TRAIN, PROBE_API="1")
    check_training(p, d, rows)
    assert order(rows) == ["START_TRACE N/A", "fwd0", "bwd0", "opt0", "quiet0", "STEP 1", "fwd1", "bwd1", "opt1",
                           "quiet1", "STEP 2", "STOP_TRACE N/A"]


RANGE = '''
import os, torch, msmemscope
if os.environ.get("PROBE_API"):
    msmemscope.config(device="cpu", output="out")
a = torch.ones(1 << 18)  # 1 MiB, before start()
msmemscope.take_snapshot(name="before_start")
msmemscope.start()
b = torch.ones(1 << 19)  # 2 MiB
msmemscope.take_snapshot(name="in_range")
msmemscope.stop()
c = torch.ones(1 << 20)  # 4 MiB
msmemscope.take_snapshot(name="after_stop")
'''


@pytest.mark.parametrize("how", ["api", "deferred"])
def test_snapshots_before_start_and_after_stop(tmp_path, how):
    if how == "api":
        _, _, rows = run(tmp_path, RANGE, PROBE_API="1")
    else:
        _, _, rows = run(tmp_path, RANGE, cli=["--device=cpu", "--collect-mode=deferred"])
    assert order(rows) == ["before_start", "START_TRACE N/A", "in_range", "STOP_TRACE N/A", "after_stop"]
    snaps = {r["Name"]: r["attr"] for r in rows if r["Event"] == "SNAPSHOT"}
    # torch holds `a` before start() though the pool's hooks are not in yet
    assert int(snaps["before_start"]["allocated"]) == MiB, snaps["before_start"]
    assert int(snaps["before_start"]["reserved"]) == MiB
    assert int(snaps["before_start"]["max_allocated"]) == MiB
    assert int(snaps["in_range"]["allocated"]) == 3 * MiB
    assert int(snaps["after_stop"]["allocated"]) == 7 * MiB
    assert int(snaps["after_stop"]["max_allocated"]) == 7 * MiB


SCOPES = '''
import torch, msmemscope
def tryit(label, f):
    try:
        f()
        print(label, "OK")
    except Exception as e:
        print(label, type(e).__name__, e)
tryit("str", lambda: msmemscope.take_snapshot("0"))
tryit("bool", lambda: msmemscope.take_snapshot(True))
tryit("neg", lambda: msmemscope.take_snapshot(-1))
tryit("big", lambda: msmemscope.take_snapshot([0, 32]))
tryit("empty", lambda: msmemscope.take_snapshot([]))
tryit("name_int", lambda: msmemscope.take_snapshot(name=3))
tryit("name_empty", lambda: msmemscope.take_snapshot(name=""))
tryit("cls", lambda: msmemscope.TakeSnapshot("x"))
msmemscope.take_snapshot(0, "mask0")
msmemscope.take_snapshot((0, 1), "a,b")
with msmemscope.take_snapshot(name="ctx"):
    b = torch.ones(1 << 18)
with msmemscope.TakeSnapshot(name="cls"):
    c = torch.ones(1 << 18)
@msmemscope.TakeSnapshot(name="deco")
def f():
    return torch.ones(1 << 18)
d = f()
try:
    with msmemscope.TakeSnapshot(name="exc"):
        e = torch.ones(1 << 18)
        raise KeyError("x")
except KeyError:
    pass
print("ret", type(msmemscope.take_snapshot(name="last")).__name__)
'''


def test_snapshot_arguments_scopes_and_messages(tmp_path):
    p, _, rows = run(tmp_path, SCOPES, cli=["--device=cpu"])
    allowed = "None, a device id 0..31, or a list/tuple of device ids"
    for line in [
        f"str TypeError msmemscope.take_snapshot: 'device_mask' must be {allowed}; got str '0'",
        f"bool TypeError msmemscope.take_snapshot: 'device_mask' must be {allowed}; got bool True",
        f"neg ValueError msmemscope.take_snapshot: device id -1 out of range (allowed: {allowed})",
        f"big ValueError msmemscope.take_snapshot: device id 32 out of range (allowed: {allowed})",
        f"empty ValueError msmemscope.take_snapshot: 'device_mask' is empty (allowed: {allowed})",
        "name_int TypeError msmemscope.take_snapshot: 'name' must be a string, got int",
        "name_empty ValueError msmemscope.take_snapshot: 'name' must be a non-empty single-line string",
        f"cls TypeError msmemscope.TakeSnapshot: 'device_mask' must be {allowed}; got str 'x'",
        "ret TakeSnapshot",
    ]:
        assert re.search("^" + re.escape(line) + "$", p.stdout, re.M), (line, p.stdout)
    snaps = [r for r in rows if r["Event"] == "SNAPSHOT"]
    names = [s["Name"] for s in snaps]
    # no row for a rejected call; Start/End around each scope, End also on an exception
    assert names == ["mask0", "a,b", "ctx Start", "ctx End", "cls Start", "cls End", "deco Start", "deco End",
                     "exc Start", "exc End", "last"], names
    alloc = {s["Name"]: int(s["attr"]["allocated"]) for s in snaps}
    assert alloc["mask0"] == 0
    for i, scope in enumerate(["ctx", "cls", "deco", "exc"]):
        assert alloc[f"{scope} Start"] == i * MiB and alloc[f"{scope} End"] == (i + 1) * MiB, alloc
    assert snaps[0]["attr"]["device_mask"] == "[0]"
    assert snaps[1]["attr"]["device_mask"] == "[0, 1]"
    assert "device_mask" not in snaps[2]["attr"]


AFTER_FINISH = '''
import torch, msmemscope
msmemscope.config(device="cpu", output="out")
msmemscope.start()
msmemscope.take_snapshot(name="kept")
msmemscope.finish()
msmemscope.take_snapshot(name="late")
with msmemscope.TakeSnapshot(name="scope"):
    pass
print("went on")
'''


def test_snapshot_after_finish_says_it_writes_nothing(tmp_path):
    p, _, rows = run(tmp_path, AFTER_FINISH)
    assert "went on" in p.stdout
    assert [r["Name"] for r in rows if r["Event"] == "SNAPSHOT"] == ["kept"]
    # a word for each dropped row (it used to be silent), no error
    for api, name, line in [("msmemscope.take_snapshot()", "late", 7), ("msmemscope.TakeSnapshot", "scope Start", 8),
                            ("msmemscope.TakeSnapshot", "scope End", 8)]:
        prog = re.escape(str(tmp_path / "prog.py"))
        assert re.search(rf"^{prog}:{line}: UserWarning: {re.escape(api)}: this process's session was ended by "
                         rf"msmemscope\.finish\(\) at {prog}:6; no SNAPSHOT row '{name}' is written$",
                         p.stderr, re.M), p.stderr
