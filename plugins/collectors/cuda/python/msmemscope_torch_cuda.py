"""PyTorch's CUDA caching allocator as msmemscope events.

The cuda collector's hook library sees the driver level: the segments the
caching allocator obtains with cudaMalloc/cuMemCreate (Event Type HAL). The
blocks PyTorch hands to tensors inside those segments are only known to the
allocator. This module turns them into framework-pool rows (MALLOC/FREE, Event
Type PTA, device cuda:N, Attr used = the allocator's allocated bytes, total =
its reserved bytes), so the leaks analysis finds blocks leaked inside the pool
and decompose attributes them, next to the HAL rows of the segments.

How (feature-checked; PyTorch has no public real-time allocator callback in
Python -- the C++ attachAllocatorTraceTracker is not bound):
  * torch.cuda.memory._record_memory_history turns on the allocator's trace
    ring ("all" actions, no stacks); the keyword form is PyTorch >= 2.1, the
    (enabled, record_context, trace_alloc_max_entries, ...) form 2.0;
  * flush() reads torch.cuda.memory._snapshot()["device_traces"], takes the
    entries new since the last flush and records them. Call it before each
    step() mark and at stop(): the rows then land in the right step (what the
    leaks rule needs), but carry the flush time, not the allocation time
    (the agent API stamps events itself), so within a step they follow the
    driver rows instead of interleaving with them;
  * torch._C._cuda_attach_out_of_memory_observer (>= 2.0) records the
    allocator's OOM at once (OOM_DETAIL/OOM_TRIGGER, name CUDACachingAllocator);
  * take_snapshot() writes SNAPSHOT rows through the hook library's exported
    msms_cuda_snapshot(device_mask, name, extra_attrs) (cuMemGetInfo numbers)
    with the allocator's reserved/max_reserved/allocated/max_allocated.

The Python package ships this module as msmemscope/_torch_cuda.py and its
_cuda.py switches it on when the target uses torch.cuda (a cuda device in the
run and torch.cuda.is_available(); started at CUDA's lazy initialisation),
flushing before each step mark, at take_snapshot() and at stop(). Operator
and access rows of CUDA tensors come from the package's operator tracking in
CUDA mode (operators on the thread's current CUDA device, accesses on the
tensor's device; device_of(tensor) is that mapping).

Recording goes through the agent's C API (msms_agent_enter/event/leave,
exported by libmsmemscope_agent.so, which the CLI preloads and the Python
package loads), via ctypes; tests pass a recorder of their own.
"""
import ctypes
import os
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional

# abi.h values (never renumbered)
EV_MALLOC = 1
EV_FREE = 2
EV_SNAPSHOT = 7
EV_OOM_DETAIL = 8
T_PTA = 11
T_SNAPSHOT = 60
T_OOM_TRIGGER = 70
DEV_NA = 0
DEV_CPU = 1
DEV_CUDA = 3
CUDA_ERROR_OUT_OF_MEMORY = 2


class Event(NamedTuple):
    kind: int
    type: int
    device_kind: int
    device_id: int
    ptr: int = 0
    size: int = 0
    aux0: int = 0
    aux1: int = 0
    name: Optional[str] = None
    attrs: Optional[str] = None


def features(torch_module=None) -> Dict[str, bool]:
    """Which of PyTorch's allocator hooks this torch has."""
    t = torch_module
    if t is None:
        try:
            import torch as t  # noqa: F811
        except Exception:
            return {"torch": False}
    cuda = getattr(t, "cuda", None)
    mem = getattr(cuda, "memory", None)
    c = getattr(t, "_C", None)
    try:
        available = bool(cuda and cuda.is_available())
    except Exception:
        available = False
    return {
        "torch": True,
        "cuda_available": available,
        "record_memory_history": hasattr(mem, "_record_memory_history"),
        "snapshot": hasattr(mem, "_snapshot"),
        "oom_observer": hasattr(c, "_cuda_attach_out_of_memory_observer"),
        "memory_stats": hasattr(cuda, "memory_stats"),
    }


def device_of(tensor):
    """(device_kind, device_id) for a tensor's row: cuda:N -> (DEV_CUDA, N)."""
    dev = getattr(tensor, "device", None)
    if dev is not None and getattr(dev, "type", None) == "cuda":
        idx = dev.index
        return DEV_CUDA, 0 if idx is None else int(idx)
    if dev is not None and getattr(dev, "type", None) == "cpu":
        return DEV_CPU, -1
    return DEV_NA, -1


# ----------------------------------------------------------------- translation
class AllocatorTranslator:
    """Allocator trace entries (dicts with action, addr, size, stream, ...) of
    one device -> events. Keeps the allocator's allocated and reserved bytes
    per device, which become Attr used and total of the PTA rows."""

    GROW = ("segment_alloc", "segment_map")
    SHRINK = ("segment_free", "segment_unmap")
    FREES = ("free_requested", "free")  # "free": before free_requested existed

    def __init__(self):
        self.allocated: Dict[int, int] = {}
        self.reserved: Dict[int, int] = {}

    def seed(self, device: int, allocated: int, reserved: int):
        self.allocated[device] = int(allocated)
        self.reserved[device] = int(reserved)

    def _attrs(self, device, entry):
        a = f"used:{self.allocated.get(device, 0)},total:{self.reserved.get(device, 0)}"
        stream = entry.get("stream")
        if stream:
            a += f",stream:{int(stream)}"
        return a

    def translate(self, device: int, entries: Iterable[dict]) -> List[Event]:
        out = []
        for e in entries:
            action = e.get("action")
            size = int(e.get("size", 0) or 0)
            addr = int(e.get("addr", 0) or 0)
            if action == "alloc":
                self.allocated[device] = self.allocated.get(device, 0) + size
                out.append(Event(EV_MALLOC, T_PTA, DEV_CUDA, device, addr, size,
                                 attrs=self._attrs(device, e)))
            elif action in self.FREES:
                self.allocated[device] = self.allocated.get(device, 0) - size
                out.append(Event(EV_FREE, T_PTA, DEV_CUDA, device, addr, 0,
                                 attrs=self._attrs(device, e)))
            elif action in self.GROW:
                self.reserved[device] = self.reserved.get(device, 0) + size
            elif action in self.SHRINK:
                self.reserved[device] = self.reserved.get(device, 0) - size
            elif action == "oom":
                free_b = int(e.get("device_free", addr) or 0)
                out.append(Event(EV_OOM_DETAIL, T_OOM_TRIGGER, DEV_CUDA, device, 0, size, 0,
                                 CUDA_ERROR_OUT_OF_MEMORY, "CUDACachingAllocator",
                                 f"device_free:{free_b},allocated:{self.allocated.get(device, 0)},"
                                 f"reserved:{self.reserved.get(device, 0)}"))
            # free_completed, snapshot and unknown actions: no row
        return out


def _entry_key(e: dict):
    return (e.get("action"), e.get("addr"), e.get("size"), e.get("stream"), e.get("time_us"))


class TraceCursor:
    """Finds the entries of a device's trace ring that are new since the last
    call. The ring keeps the last max_entries entries, so once it is full the
    old ones fall off the front; the last entry seen is searched from the end."""

    def __init__(self):
        self._last: Dict[int, tuple] = {}
        self.lost: Dict[int, bool] = {}

    def new_entries(self, device: int, entries: List[dict]) -> List[dict]:
        last = self._last.get(device)
        start = 0
        if last is not None:
            start = None
            for i in range(len(entries) - 1, -1, -1):
                if _entry_key(entries[i]) == last:
                    start = i + 1
                    break
            if start is None:  # the ring wrapped past what we saw: take all
                self.lost[device] = True
                start = 0
        if entries:
            self._last[device] = _entry_key(entries[-1])
        return list(entries[start:])


# ----------------------------------------------------------------- recording
class AgentRecorder:
    """Records events through libmsmemscope_agent.so's C API (ctypes)."""

    def __init__(self, lib=None):
        self.lib = lib if lib is not None else self._find_agent()
        L = self.lib
        L.msms_agent_enter.restype = ctypes.c_int
        L.msms_agent_enter.argtypes = []
        L.msms_agent_leave.restype = None
        L.msms_agent_leave.argtypes = []
        L.msms_agent_event.restype = None
        L.msms_agent_event.argtypes = [ctypes.c_uint16, ctypes.c_uint16, ctypes.c_uint16, ctypes.c_int16,
                                       ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_char_p, ctypes.c_char_p]
        self._snapshot = getattr(L, "msms_cuda_snapshot", None)
        if self._snapshot is not None:
            self._snapshot.restype = ctypes.c_int
            self._snapshot.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p]

    @staticmethod
    def _find_agent():
        proc = ctypes.CDLL(None)
        if hasattr(proc, "msms_agent_enter"):
            return proc
        home = os.environ.get("MSMEMSCOPE_HOME")
        if home:
            path = os.path.join(home, "lib", "msmemscope", "libmsmemscope_agent.so")
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        raise OSError("msmemscope agent not loaded in this process (run under msmemscope or import msmemscope)")

    def record(self, ev: Event):
        L = self.lib
        if not L.msms_agent_enter():
            return False
        try:
            L.msms_agent_event(ev.kind, ev.type, ev.device_kind, ev.device_id, ev.ptr, ev.size, ev.aux0,
                               ev.aux1, ev.name.encode() if ev.name else None,
                               ev.attrs.encode() if ev.attrs else None)
        finally:
            L.msms_agent_leave()
        return True

    def cuda_snapshot(self, device: int, name: str, extra: str) -> int:
        """SNAPSHOT row through the cuda hook library; 0 when it is not loaded."""
        if self._snapshot is None:
            return 0
        return int(self._snapshot(1 << device, name.encode(), extra.encode() if extra else None))


class ListRecorder:
    """Collects events in a list (tests, or to post-process)."""

    def __init__(self):
        self.events: List[Event] = []
        self.snapshots = []

    def record(self, ev: Event):
        self.events.append(ev)
        return True

    def cuda_snapshot(self, device, name, extra):
        self.snapshots.append((device, name, extra))
        return 1


# ----------------------------------------------------------------- tracer
class CudaAllocatorTracer:
    """Start/flush/stop around a collection range; see the module docstring."""

    def __init__(self, recorder=None, torch_module=None, max_entries: int = 1_000_000):
        if torch_module is None:
            import torch as torch_module  # noqa: F811
        self.torch = torch_module
        self.recorder = recorder if recorder is not None else AgentRecorder()
        self.max_entries = max_entries
        self.translator = AllocatorTranslator()
        self.cursor = TraceCursor()
        self.features = features(torch_module)
        self.active = False
        self._legacy = False

    def _devices(self):
        try:
            return range(int(self.torch.cuda.device_count()))
        except Exception:
            return range(0)

    def start(self) -> bool:
        f = self.features
        if not (f.get("record_memory_history") and f.get("snapshot")):
            return False
        mem = self.torch.cuda.memory
        try:
            mem._record_memory_history(enabled="all", context=None, stacks="python",
                                       max_entries=self.max_entries)
        except TypeError:  # PyTorch 2.0 signature
            self._legacy = True
            mem._record_memory_history(True, record_context=False, trace_alloc_max_entries=self.max_entries,
                                       trace_alloc_record_context=False)
        if f.get("memory_stats"):
            for d in self._devices():
                s = self.torch.cuda.memory_stats(d)
                self.translator.seed(d, s.get("allocated_bytes.all.current", 0),
                                     s.get("reserved_bytes.all.current", 0))
        # entries from before start are not ours to report
        snap = mem._snapshot()
        for d, entries in enumerate(snap.get("device_traces", []) or []):
            self.cursor.new_entries(d, entries)
        if f.get("oom_observer"):
            self.torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        self.active = True
        return True

    def _on_oom(self, device, alloc, device_allocated, device_free):
        if not self.active:
            return
        self.recorder.record(Event(EV_OOM_DETAIL, T_OOM_TRIGGER, DEV_CUDA, int(device), 0, int(alloc), 0,
                                   CUDA_ERROR_OUT_OF_MEMORY, "CUDACachingAllocator",
                                   f"device_free:{int(device_free)},allocated:{int(device_allocated)}"))

    def flush(self) -> int:
        if not self.active:
            return 0
        snap = self.torch.cuda.memory._snapshot()
        n = 0
        for d, entries in enumerate(snap.get("device_traces", []) or []):
            for ev in self.translator.translate(d, self.cursor.new_entries(d, entries)):
                self.recorder.record(ev)
                n += 1
        return n

    def stop(self) -> int:
        n = self.flush()
        if self.active:
            mem = self.torch.cuda.memory
            if self._legacy:
                mem._record_memory_history(False)
            else:
                mem._record_memory_history(enabled=None)
        self.active = False
        return n

    def snapshot_attrs(self, device: int) -> str:
        s = self.torch.cuda.memory_stats(device) if self.features.get("memory_stats") else {}
        reserved = int(s.get("reserved_bytes.all.current", 0))
        allocated = int(s.get("allocated_bytes.all.current", 0))
        # upstream's keys (csrc/analysis/dump.cpp); msms_cuda_snapshot puts them
        # in upstream's slots and computes reserved_rate from them
        return (f"reserved:{reserved},max_reserved:{int(s.get('reserved_bytes.all.peak', 0))},"
                f"allocated:{allocated},max_allocated:{int(s.get('allocated_bytes.all.peak', 0))}")

    def take_snapshot(self, device_mask=None, name: str = "Memory Snapshot") -> int:
        """device_mask: None (all devices), an int id, or a list/tuple of ids."""
        if device_mask is None:
            devices = list(self._devices())
        elif isinstance(device_mask, int):
            devices = [device_mask]
        else:
            devices = [int(d) for d in device_mask]
        self.flush()
        rows = 0
        for d in devices:
            rows += self.recorder.cuda_snapshot(d, name, self.snapshot_attrs(d))
        return rows
