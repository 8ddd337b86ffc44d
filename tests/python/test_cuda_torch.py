"""The PyTorch CUDA caching-allocator module (plugins/collectors/cuda/python),
tested without CUDA: fake allocator trace entries and a fake torch object.
What needs a GPU (real trace entries, their field names in a given PyTorch
release) is not verified here."""
import os
import subprocess
import sys
import textwrap
import types

from conftest import BUILD, SOURCE, run_cli
from cuda_helpers import rows

MODULE_DIR = SOURCE / "plugins" / "collectors" / "cuda" / "python"
sys.path.insert(0, str(MODULE_DIR))

import msmemscope_torch_cuda as tc  # noqa: E402

MB2 = 2 << 20


def entries():
    return [
        {"action": "segment_alloc", "addr": 0x7000, "size": MB2, "stream": 0},
        {"action": "alloc", "addr": 0x7000, "size": 512, "stream": 0},
        {"action": "alloc", "addr": 0x7200, "size": 1024, "stream": 7},
        {"action": "free_requested", "addr": 0x7000, "size": 512, "stream": 0},
        {"action": "free_completed", "addr": 0x7000, "size": 512, "stream": 0},
        {"action": "snapshot", "addr": 0, "size": 0},
        {"action": "oom", "addr": 0, "size": 4 << 30, "device_free": 1234, "stream": 0},
        {"action": "segment_map", "addr": 0x9000, "size": MB2, "stream": 0},
        {"action": "segment_unmap", "addr": 0x9000, "size": MB2, "stream": 0},
    ]


def test_translation_of_trace_entries():
    t = tc.AllocatorTranslator()
    got = t.translate(1, entries())
    E = tc.Event
    assert got == [
        E(tc.EV_MALLOC, tc.T_PTA, tc.DEV_CUDA, 1, 0x7000, 512, attrs=f"used:512,total:{MB2}"),
        E(tc.EV_MALLOC, tc.T_PTA, tc.DEV_CUDA, 1, 0x7200, 1024, attrs=f"used:1536,total:{MB2},stream:7"),
        E(tc.EV_FREE, tc.T_PTA, tc.DEV_CUDA, 1, 0x7000, 0, attrs=f"used:1024,total:{MB2}"),
        E(tc.EV_OOM_DETAIL, tc.T_OOM_TRIGGER, tc.DEV_CUDA, 1, 0, 4 << 30, 0, 2, "CUDACachingAllocator",
          f"device_free:1234,allocated:1024,reserved:{MB2}"),
    ]
    assert t.allocated == {1: 1024} and t.reserved == {1: MB2}


def test_old_free_action_and_seeded_totals():
    t = tc.AllocatorTranslator()
    t.seed(0, 100, 1000)
    got = t.translate(0, [{"action": "free", "addr": 0x10, "size": 100}])
    assert got == [tc.Event(tc.EV_FREE, tc.T_PTA, tc.DEV_CUDA, 0, 0x10, 0, attrs="used:0,total:1000")]


def test_cursor_takes_only_new_entries_and_survives_a_full_ring():
    c = tc.TraceCursor()
    e = [{"action": "alloc", "addr": i, "size": 1} for i in range(5)]
    assert c.new_entries(0, e[:3]) == e[:3]
    assert c.new_entries(0, e[:3]) == []
    # the ring dropped its first two entries and got two new ones
    assert c.new_entries(0, e[2:5]) == e[3:5]
    assert c.lost == {}
    # wrapped past everything seen: all entries, and the loss is noted
    f = [{"action": "alloc", "addr": 100 + i, "size": 1} for i in range(3)]
    assert c.new_entries(0, f) == f
    assert c.lost == {0: True}


class FakeTorch:
    """Just enough of torch for the tracer: cuda.memory._record_memory_history
    (new or 2.0 signature), _snapshot, memory_stats, the OOM observer."""

    def __init__(self, legacy=False, traces=None):
        self.calls = []
        self.traces = traces if traces is not None else [[], []]
        self.observer = None
        outer = self

        def record_history(*args, **kw):
            if legacy and kw and "enabled" in kw:
                raise TypeError("unexpected keyword argument 'enabled'")
            outer.calls.append((args, kw))

        memory = types.SimpleNamespace(_record_memory_history=record_history,
                                       _snapshot=lambda: {"segments": [], "device_traces": outer.traces})
        stats = {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0,
                 "allocated_bytes.all.peak": 3000, "reserved_bytes.all.peak": 8192}
        self.stats = stats
        self.cuda = types.SimpleNamespace(memory=memory, is_available=lambda: False, device_count=lambda: 2,
                                          memory_stats=lambda d: dict(outer.stats))

        def attach(fn):
            outer.observer = fn
        self._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=attach)


def test_tracer_start_flush_stop_with_fake_torch():
    torch = FakeTorch(traces=[[{"action": "alloc", "addr": 1, "size": 8}], []])
    rec = tc.ListRecorder()
    tr = tc.CudaAllocatorTracer(recorder=rec, torch_module=torch)
    assert tr.features == {"torch": True, "cuda_available": False, "record_memory_history": True,
                           "snapshot": True, "oom_observer": True, "memory_stats": True}
    assert tr.start()
    assert torch.calls == [((), {"enabled": "all", "context": None, "stacks": "python", "max_entries": 1000000})]
    # the entry from before start() is not reported
    torch.traces[0].append({"action": "segment_alloc", "addr": 0x100, "size": 4096})
    torch.traces[0].append({"action": "alloc", "addr": 0x100, "size": 64, "stream": 0})
    torch.traces[1].append({"action": "alloc", "addr": 0x200, "size": 32, "stream": 0})
    assert tr.flush() == 2
    assert rec.events == [
        tc.Event(tc.EV_MALLOC, tc.T_PTA, tc.DEV_CUDA, 0, 0x100, 64, attrs="used:64,total:4096"),
        tc.Event(tc.EV_MALLOC, tc.T_PTA, tc.DEV_CUDA, 1, 0x200, 32, attrs="used:32,total:0"),
    ]
    torch.observer(1, 1 << 30, 32, 99)
    assert rec.events[-1] == tc.Event(tc.EV_OOM_DETAIL, tc.T_OOM_TRIGGER, tc.DEV_CUDA, 1, 0, 1 << 30, 0, 2,
                                      "CUDACachingAllocator", "device_free:99,allocated:32")
    torch.traces[0].append({"action": "free_requested", "addr": 0x100, "size": 64, "stream": 0})
    torch.stats.update({"allocated_bytes.all.current": 1000, "reserved_bytes.all.current": 4096})
    assert tr.take_snapshot([0], name="snap") == 1
    assert rec.events[-1] == tc.Event(tc.EV_FREE, tc.T_PTA, tc.DEV_CUDA, 0, 0x100, 0, attrs="used:0,total:4096")
    assert rec.snapshots == [(0, "snap", "reserved:4096,max_reserved:8192,allocated:1000,max_allocated:3000")]
    assert tr.stop() == 0
    assert torch.calls[-1] == ((), {"enabled": None})


def test_tracer_uses_the_torch_2_0_signature_when_needed():
    torch = FakeTorch(legacy=True)
    tr = tc.CudaAllocatorTracer(recorder=tc.ListRecorder(), torch_module=torch, max_entries=10)
    assert tr.start()
    assert torch.calls == [((True,), {"record_context": False, "trace_alloc_max_entries": 10,
                                      "trace_alloc_record_context": False})]
    tr.stop()
    assert torch.calls[-1] == ((False,), {})


def test_without_allocator_history_the_tracer_does_not_start():
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=types.SimpleNamespace(),
                                                             is_available=lambda: False),
                                  _C=types.SimpleNamespace())
    tr = tc.CudaAllocatorTracer(recorder=tc.ListRecorder(), torch_module=torch)
    assert not tr.start()
    assert tr.flush() == 0


def test_device_of_tensors():
    cuda1 = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda", index=1))
    cuda_default = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda", index=None))
    cpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cpu", index=None))
    assert tc.device_of(cuda1) == (tc.DEV_CUDA, 1)
    assert tc.device_of(cuda_default) == (tc.DEV_CUDA, 0)
    assert tc.device_of(cpu) == (tc.DEV_CPU, -1)


SCRIPT = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, {module_dir!r})
    import msmemscope_torch_cuda as tc
    # a CUDA context on device 0 of the simulated driver, for the snapshot
    cu = ctypes.CDLL({libcuda!r}, mode=ctypes.RTLD_GLOBAL)
    ctx = ctypes.c_void_p()
    assert cu.cuInit(0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    rec = tc.AgentRecorder()
    t = tc.AllocatorTranslator()
    t.seed(0, 0, 2097152)
    for ev in t.translate(0, [
            {{"action": "alloc", "addr": 0x7000, "size": 512, "stream": 0}},
            {{"action": "alloc", "addr": 0x7200, "size": 1024, "stream": 0}},
            {{"action": "free_requested", "addr": 0x7000, "size": 512, "stream": 0}}]):
        assert rec.record(ev)
    print("snapshot rows", rec.cuda_snapshot(0, "py snap", "reserved:2097152,allocated:1024"))
""")


def test_agent_recorder_end_to_end_under_the_cli(cli, tmp_path):
    script = tmp_path / "pta.py"
    script.write_text(SCRIPT.format(module_dir=str(MODULE_DIR),
                                    libcuda=str(BUILD / "tests" / "lib" / "cuda" / "libcuda.so.1")))
    out = tmp_path / "out"
    p = cli(["--device=cuda", "--analysis=", f"--output={out}", "--", "/usr/bin/python3", str(script)],
            cwd=tmp_path, check_rc=0)
    assert "snapshot rows 1" in p.stdout
    procdir = [d for d in out.iterdir() if d.name.startswith("msmemscope_")][0]
    total = 16 << 30
    assert [r for r in rows(procdir, "0") if r[1] in ("PTA", "SNAPSHOT")] == [
        ("MALLOC", "PTA", "N/A", "0", "0x0000000000007000",
         "{allocation_id:1,addr:0x0000000000007000,size:512,total:2097152,used:512,process_used:0,device_used:0}"),
        ("MALLOC", "PTA", "N/A", "0", "0x0000000000007200",
         "{allocation_id:2,addr:0x0000000000007200,size:1024,total:2097152,used:1536,process_used:0,device_used:0}"),
        ("FREE", "PTA", "N/A", "0", "0x0000000000007000",
         "{allocation_id:1,addr:0x0000000000007000,size:512,total:2097152,used:1024,process_used:0,device_used:0}"),
        ("SNAPSHOT", "SNAPSHOT", "py snap", "0", "N/A",
         # upstream's keys and formats (csrc/analysis/dump.cpp); the peaks the
         # caller did not give are 0 as upstream writes them
         f"{{reserved:2097152,max_reserved:0,allocated:1024,max_allocated:0,total:{total},free:{total},"
         "device_rate:0.000000,reserved_rate:0.048828}"),
        # still live at the end: a FREE with shadow:true (COMPAT §8)
        ("FREE", "PTA", "N/A", "0", "0x0000000000007200",
         "{allocation_id:2,addr:0x0000000000007200,size:1024,shadow:true}"),
    ]
