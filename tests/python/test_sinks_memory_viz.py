"""The memory_viz sink (issue #19 item 1): memory_viz_<ts>.pickle in the
format of torch.cuda.memory._snapshot(), read by Debian's torch 1.13
(torch.cuda._memory_viz: stats, segments, memory, compare take the segment
list, the form 1.13's _snapshot() returns) and checked against what the
pytorch.org/memory_viz page reads in later versions (the dict with
'segments' and 'device_traces'); selected from the command line, YAML and
Python (sinks as a list); works from --replay; frames are our Python and C
frames."""
import json
import pickle
import sqlite3
import subprocess

import pytest

from conftest import BUILD, SOURCE, process_dirs, run_cli
from sinks_common import TS, drive, only

mv = pytest.importorskip("torch.cuda._memory_viz")
PY = "/usr/bin/python3"


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def lines(text):
    """Flamegraph input lines as (path, bytes)."""
    out = []
    for line in text.splitlines():
        path, n = line.rsplit(" ", 1)
        out.append((path, int(n)))
    return out


def check_snapshot(snap):
    """What the memory viewers rely on: blocks tile their segment in address
    order; every trace alloc lies in a segment allocated before it and is
    freed at most once, with free_requested then free_completed."""
    assert set(snap) >= {"segments", "device_traces"}
    devices = snap["msmemscope"]["devices"]
    assert len(snap["device_traces"]) == len(devices)
    for seg in snap["segments"]:
        assert 0 <= seg["device"] < len(devices)
        at = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == at and b["size"] > 0, seg
            assert b["state"] in ("active_allocated", "inactive")
            for fr in b["frames"]:
                assert set(fr) == {"filename", "line", "name"}
                assert isinstance(fr["line"], int) and isinstance(fr["name"], str)
            at += b["size"]
        assert at == seg["address"] + seg["total_size"]
        assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    assert mv.stats(snap["segments"])["segments"] == len(snap["segments"])  # 1.13 asserts the tiling too
    for trace in snap["device_traces"]:
        segs, live = {}, {}
        times = [e["time_us"] for e in trace]
        assert times == sorted(times)
        for e in trace:
            assert set(e) == {"action", "addr", "size", "stream", "time_us", "frames"}, e
            a, addr, size = e["action"], e["addr"], e["size"]
            if a == "segment_alloc":
                assert addr not in segs
                segs[addr] = size
            elif a == "segment_free":
                assert segs.pop(addr) == size
            elif a == "alloc":
                assert any(s <= addr and addr + size <= s + n for s, n in segs.items()), e
                assert addr not in live
                live[addr] = "allocated"
            elif a == "free_requested":
                assert live[addr] == "allocated"
                live[addr] = "requested"
            else:
                assert a == "free_completed" and live.pop(addr) == "requested", e


def test_rich_stream(tmp_path):
    drive("memory_viz", tmp_path, "rich")
    snap = load(tmp_path / f"memory_viz_{TS}.pickle")
    check_snapshot(snap)
    meta = snap["msmemscope"]
    assert meta["devices"] == ["npu:0 driver memory", "npu:0 framework pools (PTA)", "cpu host memory"]
    assert meta["pid"] == 4242 and meta["command"] == "python3 train.py --epochs 1"
    assert meta["trace_dropped"] == [0, 0, 0]
    # live at the end: the HAL block, the weight and the gradient, the leaky host block
    live = sorted((s["device"], s["address"], s["total_size"]) for s in snap["segments"])
    assert live == [(0, 0x7F0000000000, 64 << 20), (1, 0x10000, 4 << 20), (1, 0x900000, 2 << 20), (2, 0x30000, 3 << 20)]
    pta = snap["device_traces"][1]
    assert [e["action"] for e in pta[:4]] == ["segment_alloc", "alloc", "segment_alloc", "alloc"]
    assert sum(e["action"] == "alloc" for e in pta) == 23  # weight, activation, gradient, 20 temporaries
    assert sum(e["action"] == "free_completed" for e in pta) == 21
    # torch 1.13's flame graph input: frames root first, as file:line:function
    seg_lines = lines(mv.segments(snap["segments"], format_flamegraph=lambda s: s))
    assert ("stream_0;seg_65536;active_allocated;train.py:5:main;model.py:10:__init__", 4 << 20) in seg_lines
    assert ("stream_0;seg_196608;active_allocated;:0:main;:0:leaky_cache;:0:malloc", 3 << 20) in seg_lines
    mem = lines(mv.memory(snap["segments"], format_flamegraph=lambda s: s))
    assert sum(n for _, n in mem) == (64 << 20) + (4 << 20) + (2 << 20) + (3 << 20)
    stats = mv.stats(snap["segments"])
    assert stats["total_size"].value == stats["active_allocated"].value == sum(n for _, n in mem)


def test_blocks_lie_in_the_driver_blocks_they_were_carved_from(tmp_path):
    drive("memory_viz", tmp_path, "carve")
    snap = load(tmp_path / f"memory_viz_{TS}.pickle")
    check_snapshot(snap)
    assert snap["msmemscope"]["devices"] == ["npu:0 driver memory", "npu:0 framework pools (PTA)"]
    fw = [s for s in snap["segments"] if s["device"] == 1]
    a = 0x7F0000000000
    # the 2 MiB driver block is the segment: two live blocks, the freed one and the rest inactive
    seg = [s for s in fw if s["address"] == a][0]
    assert seg["total_size"] == 2 << 20 and seg["allocated_size"] == 4096 + (1 << 20)
    assert [(b["address"] - a, b["size"], b["state"]) for b in seg["blocks"]] == [
        (0, 4096, "active_allocated"), (4096, 65536 - 4096, "inactive"), (65536, 1 << 20, "active_allocated"),
        (65536 + (1 << 20), (1 << 20) - 65536, "inactive")]
    assert seg["frames"] == [{"filename": "/usr/lib/libascend_hal.so", "line": 0, "name": "halMemAlloc"},
                             {"filename": "alloc.cpp", "line": 120, "name": "NpuCachingAllocator::malloc"}]
    assert seg["blocks"][0]["frames"] == [{"filename": "Empty.cpp", "line": 88, "name": "at::empty"}]
    # a block outside every driver block is its own segment
    assert [(s["address"], s["total_size"]) for s in fw if s["address"] != a] == [(0x1000, 256)]
    # each byte once: the driver block the pool carved from is the pool's
    # segment only, and its driver trace entries moved with it (#27 item 4)
    assert not [s for s in snap["segments"] if s["device"] == 0 and s["address"] == a]
    assert not [e for e in snap["device_traces"][0] if e["addr"] == a]
    actions = [(e["action"], e["addr"] - a if e["addr"] >= a else e["addr"]) for e in snap["device_traces"][1]]
    assert actions == [("segment_alloc", 0), ("alloc", 0), ("alloc", 4096), ("alloc", 65536),
                       ("free_requested", 4096), ("free_completed", 4096),
                       ("segment_alloc", 0x400000), ("alloc", 0x400200), ("free_requested", 0x400200),
                       ("free_completed", 0x400200), ("segment_free", 0x400000),
                       ("segment_alloc", 0x1000), ("alloc", 0x1000)]
    segs = lines(mv.segments(fw, format_flamegraph=lambda s: s))
    assert (f"stream_0;seg_{a};inactive", (1 << 20) - 65536) in segs


def test_python_api_with_python_and_c_frames(tmp_path):
    script = SOURCE / "tests" / "programs" / "python" / "viz_train.py"
    env = {"PYTHONPATH": str(BUILD / "python")}
    p = subprocess.run([PY, str(script), "out"], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    d = only(process_dirs(tmp_path / "out"))
    pickled = only(d.glob("memory_viz_*.pickle"))
    assert f"    {pickled.name} (" in p.stdout
    snap = load(pickled)
    check_snapshot(snap)
    assert snap["msmemscope"]["devices"] == ["cpu host memory", "cpu framework pools (PTA)"]
    src = script.read_text().splitlines()
    keep_line = next(i for i, l in enumerate(src, 1) if "VIZ_KEEP" in l)
    fwd_line = next(i for i, l in enumerate(src, 1) if "VIZ_FORWARD" in l)
    kept = [s for s in snap["segments"] if s["device"] == 1 and s["total_size"] == 16384 and any(
        f["filename"] == str(script) and f["line"] == keep_line for f in s["blocks"][0]["frames"])]
    assert len(kept) == 3  # the three tensors kept: live at the end, not freed by the end of collection
    frames = kept[0]["blocks"][0]["frames"]
    names = [f["name"] for f in frames]
    # C frames (innermost first) then the Python frames
    assert any("c10::alloc_cpu" in n for n in names), names
    first_py = next(i for i, f in enumerate(frames) if f["filename"].endswith(".py"))
    assert all(not f["filename"].endswith(".py") for f in frames[:first_py])
    assert frames[-1] == {"filename": str(script), "line": keep_line, "name": "<module>"}
    # the forward's activations were allocated under Linear.forward and freed
    fwd = [e for e in snap["device_traces"][1] if e["action"] == "alloc" and any(
        f["filename"] == str(script) and f["line"] == fwd_line for f in e["frames"])]
    assert len(fwd) >= 3 and any(f["name"] == "forward" and f["filename"].endswith("linear.py") for f in fwd[0]["frames"])
    mem = lines(mv.memory(snap["segments"], format_flamegraph=lambda s: s))
    assert any(f"viz_train.py:{keep_line}:<module>" in path for path, _ in mem)


def test_cli_yaml_and_replay_give_the_same_snapshot(cli, test_bin, tmp_path):
    args = ["--device=cpu", "--events=alloc,free", "--analysis=", "--call-stack=c:8"]
    cli(args + ["--sinks=memory_viz", "--save-capture=true", f"--output={tmp_path}/run", "--",
                test_bin / "sinks_alloc_loop", "3000"], tmp_path, check_rc=0)
    d = only(process_dirs(tmp_path / "run"))
    first = load(only(d.glob("memory_viz_*.pickle")))
    check_snapshot(first)
    cfg = tmp_path / "viz.yaml"
    cfg.write_text("analysis: ''\nsinks: [memory_viz]\n")
    cli([f"--config={cfg}", f"--replay={only(d.glob('*.msmcap'))}", f"--output={tmp_path}/again"], tmp_path,
        check_rc=0)
    again = load(only(only(process_dirs(tmp_path / "again")).glob("memory_viz_*.pickle")))
    assert again["segments"] == first["segments"] and again["device_traces"] == first["device_traces"]
    # the half of the window left live by the program, with its C frames
    host = [s for s in first["segments"] if s["device"] == 0]
    loop = [s for s in host if any(f["name"] == "main" and f["filename"].endswith("alloc_loop.c")
                                   for f in s["blocks"][0]["frames"])]
    assert len(loop) == 128
    assert sum(e["action"] == "alloc" for e in first["device_traces"][0]) >= 3000


def test_trace_keeps_the_most_recent_entries(tmp_path):
    out = drive("memory_viz", tmp_path, "big", 20000, "max_trace_entries=1000")
    snap = load(tmp_path / f"memory_viz_{TS}.pickle")
    trace = only(snap["device_traces"])
    assert len(trace) == 1000 and snap["msmemscope"]["trace_dropped"] == [snap["msmemscope"]["trace_actions"][0] - 1000]
    assert trace[-1]["action"] == "alloc"  # the last event of the stream
    assert "report: memory_viz: cpu host memory: the trace keeps the last 1000 of" in out
    assert len(snap["segments"]) == 512  # the window live at the end


# ---------------------------------------------------------------- issue #27 item 4
# A real PyTorch training script: AdamW steps that each keep 100 tensors
# (freed at the interpreter's teardown under the CLI) and 4 tensors leaked
# for good (alive after exit too), so that both the host heap and the PTA
# pool hold bytes at the end.
STEPS_SCRIPT = '''"""argv: cli | api <out> <max_trace_entries>"""
import ctypes
import sys

import torch

api = sys.argv[1] == "api"
if api:
    import msmemscope
    msmemscope.config(device="cpu", events="alloc,free", call_stack="python:20", analysis="decompose",
                      format="db", output=sys.argv[2], sinks=["memory_viz"],
                      plugin_options={"memory_viz": {"max_trace_entries": sys.argv[3]}})
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
history = []
leaked = [torch.full((4096,), float(i)) for i in range(4)]
ctypes.pythonapi.Py_IncRef(ctypes.py_object(leaked))  # never freed, not even at exit
if api:
    msmemscope.start()
for step in range(12):
    x = torch.randn(32, 64)
    y = torch.randint(0, 8, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)  # STEP_FORWARD
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append([torch.ones(256) for _ in range(100)])  # STEP_KEEP
if api:
    msmemscope.stop()
print("done", len(history))
'''


def human(n):
    """The console's figures (framework/host/session.cpp human())."""
    v, u = float(n), 0
    while abs(v) >= 1024 and u < 4:
        v, u = v / 1024, u + 1
    return f"{n} B" if u == 0 else f"{v:.1f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][u]}"


def owners_live(d):
    """Live bytes at the end per pool from the decomposition (db findings)."""
    db = only(d.glob("device_cpu/dump/memscope_dump_*.db"))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = [json.loads(c) for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='owners'")]
    finally:
        con.close()
    live = {}
    for o in rows:
        pool = o["owner"].split("@")[0]
        live[pool] = live.get(pool, 0) + int(o["live_bytes"])
    return live


def totals(snap):
    """Per device name: (segments' total_size, active bytes), from torch's own functions."""
    names = snap["msmemscope"]["devices"]
    out = {}
    for i, name in enumerate(names):
        segs = [s for s in snap["segments"] if s["device"] == i]
        st = mv.stats(segs)
        out[name] = (st["total_size"].value if segs else 0, st["active_allocated"].value if segs else 0)
    return out


def script_line(src, marker):
    return next(i for i, l in enumerate(src.splitlines(), 1) if marker in l)


def check_each_byte_once(snap, totals_by_name, live, stdout):
    host, fw = "cpu host memory", "cpu framework pools (PTA)"
    assert snap["msmemscope"]["devices"] == [host, fw]
    # the host's segments are cpu/HOST's final bytes, the pool's active
    # blocks cpu/PTA's (the console's figures; the decomposition's exactly)
    assert totals_by_name[host] == (live["HOST"], live["HOST"])
    assert totals_by_name[fw][1] == live["PTA"] >= 4 * 4096 * 4
    # a CPU tensor's malloc is the pool's segment, of its size
    assert totals_by_name[fw][0] == live["PTA"]
    pta_line = next(l for l in stdout.splitlines() if l.strip().startswith("cpu/PTA: peak"))
    assert pta_line.endswith(f"final {human(live['PTA'])}"), pta_line
    host_line = next(l for l in stdout.splitlines() if l.strip().startswith("cpu/HOST: peak"))
    assert host_line.endswith(f"final {human(live['HOST'])}"), host_line
    # torch's _memory_viz.memory() totals each byte once: host + pool
    mem = lines(mv.memory(snap["segments"], format_flamegraph=lambda s: s))
    assert sum(n for _, n in mem) == live["HOST"] + live["PTA"]
    # no address is a segment of both devices
    addrs = [{s["address"] for s in snap["segments"] if s["device"] == i} for i in (0, 1)]
    assert not addrs[0] & addrs[1]


def test_torch_api_each_byte_once(tmp_path):
    """Python API (stop() with tensors live): the snapshot's segments total
    what the console and the decomposition say; over the whole trace, no
    byte is live on the host device and in the pool at once."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS_SCRIPT)
    env = {"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([PY, str(script), "api", "out", "1000000"], cwd=str(tmp_path), env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    d = only(process_dirs(tmp_path / "out"))
    snap = load(only(d.glob("memory_viz_*.pickle")))
    check_snapshot(snap)
    assert snap["msmemscope"]["trace_dropped"] == [0, 0]
    live = owners_live(d)
    check_each_byte_once(snap, totals(snap), live, p.stdout)
    # the weights, the optimizer state and the kept tensors are live at stop()
    assert live["PTA"] >= 12 * 100 * 1024
    # Over time: a host block and a pool segment at one address are never
    # live at once (each device's intervals from its own trace, in order:
    # a pool segment that lasts is never inside a host block's lifetime).
    def intervals(trace):
        done, open_ = {}, {}
        for e in trace:
            if e["action"] == "segment_alloc":
                open_[e["addr"]] = e["time_us"]
            elif e["action"] == "segment_free":
                done.setdefault(e["addr"], []).append((open_.pop(e["addr"]), e["time_us"]))
        for addr, t in open_.items():
            done.setdefault(addr, []).append((t, float("inf")))
        return done
    host_iv, pool_iv = (intervals(t) for t in snap["device_traces"])
    both = [(hex(addr), c, d, a, b) for addr, iv in pool_iv.items() for c, d in iv if d > c
            for a, b in host_iv.get(addr, []) if a <= c and d <= b]
    assert not both, both[:5]
    # each kept tensor's malloc went to the pool, not to the host
    assert sum(len(iv) for iv in pool_iv.values()) >= 12 * 100
    assert len(pool_iv.keys() & host_iv.keys()) >= 10  # (addresses do come back, one device after the other)
    # the PTA device's allocs carry the training loop's frames
    src = STEPS_SCRIPT
    keep = script_line(src, "# STEP_KEEP")
    allocs = [e for e in snap["device_traces"][1] if e["action"] == "alloc"]
    assert sum(any(f["filename"] == str(script) and f["line"] == keep for f in e["frames"]) for e in allocs) == 1200


def test_torch_cli_trace_keeps_the_steps(cli, tmp_path):
    """CLI: the interpreter's teardown frees the kept tensors (3,600 PTA
    actions) and Python's objects; with max_trace_entries=1000 each trace is
    the 500 entries before the end of the last step and the 500 after it,
    so the PTA trace shows the training steps' allocations, not only the
    teardown's frees. The segments total the console's final figures."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS_SCRIPT)
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=decompose", "--format=db", "--call-stack=python:20",
             "--sinks=memory_viz", "--plugin-option=memory_viz.max_trace_entries=1000", f"--output={tmp_path}/run",
             "--", PY, script, "cli"], tmp_path, check_rc=0)
    d = only(process_dirs(tmp_path / "run"))
    snap = load(only(d.glob("memory_viz_*.pickle")))
    live = owners_live(d)
    check_each_byte_once(snap, totals(snap), live, p.stdout)
    assert live["PTA"] == 4 * 4096 * 4  # the leaked tensors: the rest was freed at teardown
    meta = snap["msmemscope"]
    host, pta = snap["device_traces"]
    assert len(host) == len(pta) == 1000
    for i in (0, 1):
        assert meta["trace_cut"][i] > 0
        assert meta["trace_dropped"][i] == meta["trace_actions"][i] - 1000
    assert meta["trace_cut"][1] > 3000  # most of the teardown's frees of the 1,200 kept tensors
    assert ("memory_viz: cpu framework pools (PTA): the trace keeps 1000 of "
            f"{meta['trace_actions'][1]} actions: the last 500 before the end of the last step and the 500 after it; "
            f"the last {meta['trace_cut'][1]} are left out (option max_trace_entries)\n") in p.stdout
    # allocations of the training steps, with the loop's lines
    keep, fwd = script_line(STEPS_SCRIPT, "# STEP_KEEP"), script_line(STEPS_SCRIPT, "# STEP_FORWARD")
    ours = [e for e in pta if e["action"] == "alloc" and any(f["filename"] == str(script) for f in e["frames"])]
    step_lines = {f["line"] for e in ours for f in e["frames"] if f["filename"] == str(script)}
    assert len(ours) >= 100 and {keep, fwd} <= step_lines, step_lines
    # and the start of the teardown: frees of the kept tensors after them
    last_alloc = max(i for i, e in enumerate(pta) if e["action"] == "alloc")
    assert sum(e["action"] == "free_completed" for e in pta[last_alloc:]) >= 100
    # the trace stays consistent within its window, in time order
    times = [e["time_us"] for e in pta]
    assert times == sorted(times)
