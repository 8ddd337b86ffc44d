"""The CUDA side of the PyTorch collector, switched on by _torch.enable()
when the target uses torch.cuda: the run collects a cuda device
(``--device=cuda[:N]``) and ``torch.cuda.is_available()``. Then

* the caching allocator's blocks become framework-pool rows (MALLOC/FREE,
  Event Type PTA, Device Id N) through msmemscope/_torch_cuda.py (the cuda
  collector's module, plugins/collectors/cuda/python), read from the
  allocator's trace before each step mark, at take_snapshot() and at stop();
* take_snapshot() also writes the cuda collector's SNAPSHOT rows with the
  allocator's reserved/allocated numbers (when its hook library is loaded,
  i.e. under the CLI);
* operator rows (ATEN_START/END) carry the thread's current CUDA device, as
  upstream's carry the current NPU, and a CUDA tensor's ACCESS rows its own
  device (the C++ observer's CUDA mode, or _torch._OpMode).

Nothing is started before CUDA is: while torch.cuda is not initialised the
start waits in torch.cuda's own queue of calls made at its lazy
initialisation, so a process that never touches the GPU gets no CUDA
context from us. The driver-level rows (segments as HAL, kernel launches)
come from the cuda collector's hook library (the CLI preloads it).
"""
from __future__ import annotations

import ctypes
import sys
from typing import Callable, Optional

from ._shared import ext as _ext  # never the session: it imports the collectors
from . import _torch_cuda as tc

_tracer: Optional["tc.CudaAllocatorTracer"] = None
_state = {"on": False, "queued": False, "active": False, "warned": False}


class _Recorder:
    """Rows through the package's agent API, written only while collecting;
    SNAPSHOT rows through the cuda hook library's msms_cuda_snapshot."""

    def __init__(self) -> None:
        try:
            self._snap = ctypes.CDLL(None).msms_cuda_snapshot
            self._snap.restype = ctypes.c_int
            self._snap.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p]
        except AttributeError:
            self._snap = None

    def record(self, ev: "tc.Event") -> bool:
        if not _ext.collecting():
            return False
        _ext.event(ev.kind, ev.type, ev.device_kind, ev.device_id, ev.ptr, ev.size, ev.aux0, ev.aux1,
                   ev.name or "", ev.attrs or "")
        return True

    def cuda_snapshot(self, device: int, name: str, extra: str) -> int:
        if self._snap is None:
            return 0
        return int(self._snap(1 << device, name.encode(), extra.encode() if extra else None))


def wanted(torch, devices: str) -> bool:
    """devices: the run's device option (e.g. "cuda,cpu")."""
    if not any(d.strip().startswith("cuda") for d in devices.split(",")):
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _warn(text: str) -> None:
    if not _state["warned"]:
        _state["warned"] = True
        sys.stderr.write(f"msmemscope: warning: {text}\n")


def _start(torch, ops_on_cuda: Callable[[], None], recorder=None) -> None:
    global _tracer
    _state["active"] = True
    ops_on_cuda()
    if _tracer is None:
        _tracer = tc.CudaAllocatorTracer(recorder=recorder if recorder is not None else _Recorder(),
                                         torch_module=torch)
    if _tracer.active:
        return
    try:
        started = _tracer.start()
    except Exception as e:  # an allocator-history API of another shape
        started = False
        _warn(f"PyTorch's CUDA caching allocator is not traced ({type(e).__name__}: {e}); "
              "driver rows and operators are still recorded")
        return
    if not started:
        _warn("this PyTorch has no allocator history (torch.cuda.memory._record_memory_history/_snapshot): "
              "the caching allocator's blocks are not recorded; driver rows and operators are")


def enable(torch, devices: str, ops_on_cuda: Callable[[], None], recorder=None) -> bool:
    """At start(): returns whether CUDA mode is on. ops_on_cuda() switches
    the operator tracking to CUDA devices (called once CUDA is initialised)."""
    if not wanted(torch, devices):
        return False
    _state["on"] = True
    cuda = torch.cuda
    lazy = getattr(cuda, "_lazy_call", None)
    initialised = getattr(cuda, "is_initialized", None)
    if lazy is None or initialised is None or initialised():
        _start(torch, ops_on_cuda, recorder)
    elif not _state["queued"]:
        _state["queued"] = True

        def at_cuda_init():
            _state["queued"] = False
            if _state["on"]:
                _start(torch, ops_on_cuda, recorder)
        lazy(at_cuda_init)
    return True


def active() -> bool:
    return _state["active"]


def flush() -> None:
    """Before a step mark: the allocator's blocks so far land in this step."""
    if _tracer is not None and _tracer.active:
        _tracer.flush()


def take_snapshot(device_mask, name: str) -> int:
    if _tracer is None or not _tracer.active:
        return 0
    return _tracer.take_snapshot(device_mask, name)


def disable() -> None:
    """At stop(): what the allocator did until now, then its trace off."""
    _state["on"] = False
    _state["active"] = False
    if _tracer is not None and _tracer.active:
        _tracer.stop()
