"""The PyTorch CUDA module is part of the package and on by itself when the
target uses torch.cuda (issue #20 item 4): the caching allocator's blocks as
PTA rows on their device, operators on the current CUDA device.

Torch here is CPU-only: the allocator is the fake of test_cuda_torch.py
(allocator trace entries handed out by torch.cuda.memory._snapshot), the
driver the simulated libcuda.so.1. What a real GPU adds (real trace entries)
is not verified here.
"""
import os
import subprocess
import sys
import textwrap
import types

import pytest

from conftest import BUILD, SOURCE, process_dirs, read_dump, run_cli

PY = "/usr/bin/python3"
MODULE = SOURCE / "plugins" / "collectors" / "cuda" / "python" / "msmemscope_torch_cuda.py"
LIBCUDA = BUILD / "tests" / "lib" / "cuda" / "libcuda.so.1"
sys.path.insert(0, str(MODULE.parent))


def test_the_built_and_the_installed_package_carry_the_module(tmp_path):
    built = BUILD / "python" / "msmemscope" / "_torch_cuda.py"
    assert built.read_text() == MODULE.read_text()
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, PYTHONPATH=str(prefix / "python"))
    env.pop("MSMEMSCOPE_SESSION", None)
    r = subprocess.run([PY, "-c", "import msmemscope._cuda as c, msmemscope._torch_cuda as t; "
                        "print(c.__file__); print(t.CudaAllocatorTracer.__name__)"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(prefix / "python" / "msmemscope" / "_cuda.py"), "CudaAllocatorTracer"]


class FakeCudaTorch:
    """torch with a CUDA it reports available: its allocator history, lazy
    initialisation queue and stats, as far as _cuda.py uses them."""

    def __init__(self, available=True, initialised=False):
        self.history = []
        self.queued = []
        self.initialised = initialised
        self.traces = [[], []]
        outer = self
        memory = types.SimpleNamespace(
            _record_memory_history=lambda *a, **kw: outer.history.append(kw),
            _snapshot=lambda: {"segments": [], "device_traces": outer.traces})
        self.cuda = types.SimpleNamespace(
            memory=memory, is_available=lambda: available, is_initialized=lambda: outer.initialised,
            _lazy_call=outer.queued.append, device_count=lambda: 2, memory_stats=lambda d: {})
        self._C = types.SimpleNamespace()


@pytest.fixture
def cuda_mod(monkeypatch):
    sys.path.insert(0, str(BUILD / "python"))
    try:
        import msmemscope._cuda as c
    finally:
        sys.path.pop(0)
    c._tracer = None
    c._state.update(on=False, queued=False, active=False, warned=False)
    yield c
    c._tracer = None
    c._state.update(on=False, queued=False, active=False, warned=False)


def test_not_on_without_a_cuda_device_in_the_run_or_without_cuda(cuda_mod):
    calls = []
    assert not cuda_mod.enable(FakeCudaTorch(initialised=True), "cpu", lambda: calls.append(1))
    assert not cuda_mod.enable(FakeCudaTorch(available=False, initialised=True), "cuda", lambda: calls.append(1))
    assert calls == [] and not cuda_mod.active()


def test_waits_for_torch_cuda_initialisation_then_traces(cuda_mod):
    import msmemscope_torch_cuda as tc
    torch = FakeCudaTorch(initialised=False)
    calls, rec = [], tc.ListRecorder()
    assert cuda_mod.enable(torch, "cuda:1,cpu", lambda: calls.append("ops"), recorder=rec)
    # nothing started before CUDA is: one call queued for its initialisation
    assert calls == [] and torch.history == [] and len(torch.queued) == 1 and not cuda_mod.active()
    assert cuda_mod.enable(torch, "cuda:1,cpu", lambda: calls.append("ops"), recorder=rec)
    assert len(torch.queued) == 1  # queued once
    torch.initialised = True
    torch.queued[0]()
    assert calls == ["ops"] and cuda_mod.active()
    assert torch.history[0]["enabled"] == "all"
    torch.traces[1].append({"action": "alloc", "addr": 0x100, "size": 64, "stream": 0})
    cuda_mod.flush()
    assert rec.events == [tc.Event(tc.EV_MALLOC, tc.T_PTA, tc.DEV_CUDA, 1, 0x100, 64, attrs="used:64,total:0")]
    cuda_mod.disable()
    assert torch.history[-1] == {"enabled": None} and not cuda_mod.active()


def test_stopped_before_cuda_starts_nothing(cuda_mod):
    torch = FakeCudaTorch(initialised=False)
    calls = []
    assert cuda_mod.enable(torch, "cuda", lambda: calls.append("ops"))
    cuda_mod.disable()
    torch.initialised = True
    torch.queued[0]()
    assert calls == [] and torch.history == [] and not cuda_mod.active()


# A plain PyTorch (CPU) target whose torch.cuda says it is available, with
# the fake allocator; the simulated driver has a context on device 1.
SCRIPT = textwrap.dedent("""
    import ctypes, sys, types
    import torch
    cu = ctypes.CDLL({libcuda!r}, mode=ctypes.RTLD_GLOBAL)
    ctx = ctypes.c_void_p()
    assert cu.cuInit(0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    traces = [[], []]
    stats = {{"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0}}
    torch.cuda.is_available = lambda: True
    torch.cuda.is_initialized = lambda: True
    torch.cuda.device_count = lambda: 2
    torch.cuda.current_device = lambda: 1
    torch.cuda.memory_stats = lambda d=None: dict(stats)
    torch.cuda.memory._record_memory_history = lambda *a, **kw: None
    torch.cuda.memory._snapshot = lambda: {{"segments": [], "device_traces": traces}}
    import msmemscope
    msmemscope.start()
    a = torch.ones(4, 4)
    b = torch.mm(a, a)
    traces[1] += [{{"action": "segment_alloc", "addr": 0x7000, "size": 4096, "stream": 0}},
                  {{"action": "alloc", "addr": 0x7000, "size": 512, "stream": 0}}]
    msmemscope.step()
    traces[1].append({{"action": "free_requested", "addr": 0x7000, "size": 512, "stream": 0}})
    c = b + a
    msmemscope.stop()
    print("sum", float(c.sum()))
""")


def test_a_torch_cuda_target_gets_allocator_rows_and_operators_on_its_device(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "t.py"
    script.write_text(SCRIPT.format(libcuda=str(LIBCUDA)))
    out = tmp_path / "out"
    p = run_cli(["--device=cuda,cpu", "--collect-mode=deferred", "--events=alloc,free,launch,access", "--level=op",
                 "--analysis=", f"--output={out}", "--", PY, str(script)], cwd=tmp_path,
                env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    assert "sum 80.0" in p.stdout
    assert "caching allocator" not in p.stderr, p.stderr
    (d,) = process_dirs(out)
    dev1 = read_dump(next((d / "device_1" / "dump").glob("memscope_dump_*.csv")))
    ops = [(r["Event Type"], r["Name"], r["Device Id"]) for r in dev1 if r["Event"] == "OP_LAUNCH"]
    assert ("ATEN_START", "torch._ops.aten.mm.default", "1") in ops
    assert ("ATEN_END", "torch._ops.aten.add.Tensor", "1") in ops
    assert {dev for _, _, dev in ops} == {"1"}
    # the caching allocator's block: MALLOC in step 1 (before its mark), FREE after
    seq = [(r["Event"], r["Event Type"], r["Ptr"]) for r in dev1
           if r["Event Type"] in ("PTA", "STEP")]
    assert seq == [("MALLOC", "PTA", "0x0000000000007000"), ("SYSTEM", "STEP", "N/A"),
                   ("FREE", "PTA", "0x0000000000007000")]
    malloc = [r for r in dev1 if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"][0]
    assert (malloc["attr"]["size"], malloc["attr"]["used"], malloc["attr"]["total"]) == ("512", "512", "4096")
    # CPU tensors stay on cpu: their storage (PTA) and their ACCESS rows
    cpu = read_dump(next((d / "device_cpu" / "dump").glob("memscope_dump_*.csv")))
    assert [r for r in cpu if r["Event"] == "ACCESS" and r["Name"] == "torch._ops.aten.mm.default"]
    assert not [r for r in cpu if r["Event"] == "OP_LAUNCH"]
