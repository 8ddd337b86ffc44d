"""The memory_viz sink (issue #19 item 1): memory_viz_<ts>.pickle in the
format of torch.cuda.memory._snapshot(), read by Debian's torch 1.13
(torch.cuda._memory_viz: stats, segments, memory, compare take the segment
list, the form 1.13's _snapshot() returns) and checked against what the
pytorch.org/memory_viz page reads in later versions (the dict with
'segments' and 'device_traces'); selected from the command line, YAML and
Python (sinks as a list); works from --replay; frames are our Python and C
frames."""
import pickle
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
