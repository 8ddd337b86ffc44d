"""The public functions of the package (COMPAT §2)."""
from __future__ import annotations

import dis
import functools
import gc
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _collect, _cuda, _session, _shared, watcher
from ._session import _ext

__all__ = ["config", "start", "stop", "step", "take_snapshot", "TakeSnapshot", "RecordFunction"]


# ---------------------------------------------------------------- config
def _check_text(where: str, key: str, value: str) -> None:
    """Refuses strings that cannot reach the C side intact: a NUL byte would
    cut them short, a lone surrogate (e.g. from os.fsdecode of bad bytes)
    cannot be encoded as UTF-8."""
    i = value.find("\0")
    if i >= 0:
        raise ValueError(f"{where}: '{key}' contains a NUL character (at position {i})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{where}: '{key}' is not valid text: {value[e.start]!r} at position {e.start} "
                         f"cannot be encoded as UTF-8") from None

def config(**kwargs: Any) -> None:
    """Sets collection options. Keyword-only, every value a string (sinks may
    also be a list of names, suppress a list of paths, aggregate and
    default_suppressions a bool); the same names, values and checks as the
    command line (``msmemscope --help``).

    Keys:
      device       npu, npu:{0..31}, cpu, cuda, cuda:{0..31}; several with ','
                   (default npu; a script on a machine without an NPU wants "cpu")
      level        0 / op (operator level, default: operator rows), 1 / kernel
                   (kernel launches), or both: 'kernel,op' / '0,1'
      events       alloc, free, launch, access, traceback (default alloc,free,launch);
                   "" records none; traceback = the Python trace file
      call_stack   python, c, each with an optional :depth 0..1000, e.g. "c:20,python:10"
      analysis     analyzer names: leaks (default), inefficient, decompose, oom[:K],
                   or any analyzer plugin found (see list_analyzers()); "" for none
      watch        "[start[:outN],]end[,full-content]"
      data_format  csv (default) or db; alias: format
      output       output folder (default memscopeDumpResults); alias: output_path;
                   a relative one is in the folder current at this config() call
      sinks        more output sinks by plugin name, e.g. "trace,html" or ["trace", "memory_viz"]
      steps        at most 5 step numbers to collect, e.g. "1,2,3"
      collect_mode immediate or deferred
      log_level    info, warn (default), error
      aggregate    True: long runs keep no per-event rows (csv/db sinks off), only
                   what the analyses and reports need; the capture is released as
                   it is read (the command line's --aggregate)
      plugin_path  more folders to search for plugins: a path or a list of paths
                   (the command line's --plugin-path); relative to the current folder
      plugin_options  options of plugins: {"my_peak": {"threshold": 5}} or
                   {"my_peak.threshold": "5"} (the command line's --plugin-option);
                   values str, int or bool, or a list of them (joined by ',' as
                   YAML's lists are), checked against the plugin's schema
      suppress     leak suppression files (heaptrack/LSan patterns, one per line):
                   a path or a list of paths, relative to the current folder (the
                   command line's --suppress); matching sites leave the leak report
      default_suppressions  False: report the CPython interpreter's own one-time
                   allocations too (default True; --default-suppressions)
      plugin_time_budget  "SECONDS[,FINISH_SECONDS]": a plugin call over it is
                   stopped and the plugin treated as crashed (default "60,600";
                   --plugin-time-budget). At exit the interpreter waits for the
                   host at most MSMEMSCOPE_STOP_WAIT_S seconds (default 600).

    Under the command line (``msmemscope ... python3 train.py``) the CLI's
    plugin folders and plugin options are known here already, so values
    naming its plugins check out as they would on the command line. Its
    options apply: the values given here are checked, not used, so a
    config() call resets none of them (upstream's resets all but output,
    data_format and watch to the defaults).

    Each call starts from the defaults, as upstream's config() does: a key
    set by an earlier call and not named in this one goes back to its
    default, with a warning naming it (name it again to keep it; none for
    an ``events``, ``call_stack`` or ``level`` that did what its default
    does). Kept from earlier calls: ``output``, ``data_format`` and
    ``watch``, which are taken from the first call only (one that raised
    does not count), as upstream's: named with another value in a later
    call, also one the first did not set, they are ignored with a warning;
    and ``plugin_path`` and ``plugin_options`` (ours). The first start(),
    step(), take_snapshot() or tracer.start() opens the session
    with the values set so far (defaults for the others). After that,
    ``events``, ``call_stack`` and ``level`` may still change, as
    upstream's config() allows: the change applies from the next start() on
    (its START_TRACE row, Attr events:<what is written>, and the rows after
    it; set during a range, it waits for the next one, with a warning),
    unless it needs other collectors than the session installed (a
    RuntimeError says which). Any other key is fixed by then (the host's
    analyses, devices, sinks, steps and files run over the whole session):
    a change, also a first ``output`` when no config() call came before
    the session opened, is a RuntimeError naming the key, why, and the call
    that opened the session; not named, it keeps the session's value.

    Raises TypeError for an unknown key or a value that is not a string,
    ValueError (with the command line's message, naming the key and the
    allowed values) for a bad value.
    """
    for key, value in kwargs.items():
        if isinstance(value, str):
            _check_text("msmemscope.config", key, value)
    _session.configure(kwargs)


# ---------------------------------------------------------------- range
def start() -> None:
    """Starts (or resumes) collection: SYSTEM START_TRACE, then every event
    the configuration asks for until stop(). The first call opens the
    session (spawns the host when not running under the CLI)."""
    _session.session("msmemscope.start()").refuse_if_finished("msmemscope.start()")
    if _shared.auto_steps() and _shared.auto_step is None:
        # Under the CLI, before the optimizer marked a step: the program may
        # mark its steps itself, with step() after opt.step() (upstream's
        # pattern); the optimizer's first mark waits for it (_shared.py).
        _shared.auto_hold = "hold"
    # The profiler's own work, not the program's memory at its start() line
    # (the collectors' first imports; the list of every live object that the
    # search for existing tensors makes, ~800 KiB in a PyTorch process): the
    # hooks are off while it runs; its rows (shadow rows, owners) are written
    # all the same. The existing tensors are looked for before collection
    # starts: the agent's shadow row of each host heap block allocated while
    # it was off is then followed by the storage carved there.
    s = _session.session("msmemscope.start()")
    options, attrs = s.take_pending() if not _ext.collecting() else ("", "")
    searched = _ext.without_hooks(lambda: _note_existing_tensors(options))
    _ext.start(options, attrs)
    _ext.without_hooks(lambda: _start_collectors(searched))


def _option_items(options: str, key: str) -> List[str]:
    """The items of one option of the agent's "key=a,b;key=..." text."""
    for item in options.split(";"):
        k, _, v = item.partition("=")
        if k == key:
            return [x for x in v.split(",") if x]
    return []


def _note_existing_tensors(options: str = "") -> bool:
    """Whether the CPU tensors that exist were noted (for the PyTorch pool).
    options: the agent's options from this start() on ("" unchanged)."""
    alloc = "alloc" in _option_items(options, "events") if options else _ext.wants("alloc")
    if "torch" not in sys.modules or _ext.collecting() or not alloc:
        return False
    from . import _torch
    _torch.note_existing(_cpu_tensor_storages())
    return True


def _start_collectors(searched: bool) -> None:
    _collect.enable_for_range()
    _report_existing_tensors(searched)
    watcher.range_started()


def _report_existing_tensors(searched: bool = False) -> None:
    """Shadow events (framework/host/shadow.h): the storages of the CPU
    tensors that exist now (a model built before start(); looked for just
    before it when `searched`) and the pool's blocks allocated while
    collection was off are written as MALLOC with shadow:true (those at a
    host heap block's address already, after its own: pta_shadow_after_host);
    blocks freed meanwhile as FREE with shadow:true."""
    if "torch" not in sys.modules or not _ext.collecting():
        return
    _ext.pta_shadow_sync([] if searched else list(_cpu_tensor_storages().items()))


def _cpu_tensor_storages() -> Dict[int, int]:
    """The storages (address -> bytes) of the CPU tensors that exist now."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    existing = {}
    tensor = torch.Tensor
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads obj.__class__ through the
        # object's own __getattribute__ when its type is not a Tensor, and
        # some objects warn on any attribute read (torch.distributed.reduce_op:
        # "torch.distributed.reduce_op is deprecated").
        cls = type(obj)
        if cls is not tensor and not issubclass(cls, tensor):
            continue
        try:
            if obj.device.type != "cpu" or obj.is_sparse or obj.is_meta:
                continue
            st = obj.untyped_storage() if hasattr(obj, "untyped_storage") else obj.storage()
            ptr, size = st.data_ptr(), st.nbytes()
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):
            continue  # a tensor without a plain storage (functional, quantized...)
        if ptr and size:
            existing[ptr] = size
    return existing


def stop() -> None:
    """Stops collection (SYSTEM STOP_TRACE). start() may be called again."""
    s = _session.active_session()
    if (s is None and not _ext.agent_loaded()) or (s is not None and s.finished_by):
        return  # nothing to stop: never started, or ended by finish()
    watcher.range_stopped()
    _collect.disable_for_range()
    _shared.auto_hold = ""  # a provisional optimizer mark stands: no msmemscope.step() came
    _ext.stop()


def finish() -> str:
    """Ends this process's session now, for a program that goes on after
    its profiled part (a notebook's kernel, a service): collection stops,
    the host writes every file (the dump, the html, summary.json...) and
    prints its report, and finish() returns when it has, with the process
    folder. Without it that happens at the process's exit. One session a
    process: start() and step() refuse after it."""
    s = _session.active_session()
    if s is None:
        raise RuntimeError("msmemscope.finish(): there is no session to finish (msmemscope.start() was never "
                           "called in this process)")
    if not s.closed:
        stop()
    return s.finish()


def step() -> int:
    """Marks the end of a step (SYSTEM STEP, Name = the step number, 1, 2, ...);
    returns the step number. Outside a collection range (before start(),
    after stop()) it marks nothing, as upstream's, and returns the number of
    the last step marked; a first call before start() opens the session
    with the config() values set so far (config() comes first).

    Under the CLI a script that does not call step() has its optimizer
    steps marked (its other API calls keep them); its first step() call
    ends the iteration the last optimizer step ended (no second mark) and
    marks from then on. After the program's start() (before any optimizer
    mark) the optimizer's first mark is provisional until the next
    optimizer step: step() right after opt.step(), upstream's pattern,
    marks every step itself."""
    _session.session("msmemscope.step()").refuse_if_finished("msmemscope.step()")
    _shared.own_steps = True
    held = _shared.auto_hold == "held"
    _shared.auto_hold = ""
    taken_over = _shared.auto_step
    if held:
        # The optimizer's provisional mark (this iteration's) is this call's:
        # a row of its number at this time takes it over (the host drops the
        # provisional row; framework/host/provisional_step.h).
        _shared.auto_step = None
        _cuda.flush()
        return int(_ext.step_with("takes_over:true", True))
    if taken_over is not None:
        # The optimizer marked the steps until this first call (a plain
        # script under the CLI): this call ends the iteration its last
        # opt.step() ended, and marks no second, empty step.
        _shared.auto_step = None
        return int(taken_over)
    _cuda.flush()  # the caching allocator's blocks of this step before its mark
    return int(_ext.step())


# ---------------------------------------------------------------- snapshot
def _check_mask(device_mask: Any, api: str) -> Optional[List[int]]:
    allowed = "None, a device id 0..31, or a list/tuple of device ids"
    if device_mask is None:
        return None
    items = device_mask if isinstance(device_mask, (list, tuple)) else [device_mask]
    if isinstance(device_mask, (list, tuple)) and not device_mask:
        raise ValueError(f"msmemscope.{api}: 'device_mask' is empty (allowed: {allowed})")
    out = []
    for d in items:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"msmemscope.{api}: 'device_mask' must be {allowed}; got "
                            f"{type(d).__name__} {d!r}")
        if d < 0 or d > 31:
            raise ValueError(f"msmemscope.{api}: device id {d} out of range (allowed: {allowed})")
        out.append(d)
    return out


def _snapshot_attrs() -> str:
    """upstream's SNAPSHOT keys (csrc/analysis/dump.cpp), in its order and
    number formats, then ours: rss and peak_rss of this process."""
    m = _ext.memory_info()
    total = int(m.get("total", 0))
    free = int(m.get("free", 0))
    used = int(m.get("pta_used", 0))
    peak = int(m.get("pta_peak", 0))
    if not m.get("pta_tracked", True):
        # Before the first start() the pool's hooks are not in and its
        # figures say 0 with tensors live (a model built before start()):
        # torch holds the live tensors' storages. Their peak before is
        # unknown, at least that.
        used = sum(_ext.without_hooks(_cpu_tensor_storages).values())
        peak = max(peak, used)
    reserved = allocated = used   # the CPU pool keeps no cache
    device_rate = 100.0 * (total - free) / total if total > 0 else 0.0
    reserved_rate = 100.0 * allocated / reserved if reserved > 0 else 0.0
    return (f"reserved:{reserved},max_reserved:{peak},allocated:{allocated},max_allocated:{peak},total:{total},"
            f"free:{free},device_rate:{device_rate:f},reserved_rate:{reserved_rate:f},"
            f"rss:{int(m.get('rss', 0))},peak_rss:{int(m.get('peak_rss', 0))}")


def _emit_snapshot(name: str, mask: Optional[List[int]], api: str) -> None:
    s = _session.session(api)
    if s.finished_by:
        # The row would go nowhere: say so rather than drop it silently.
        # Not an error as start()/step() make it: a decorated function or a
        # framework hook of a program going on after finish() keeps working.
        warnings.warn(f"{api}: this process's session was ended by {s.finished_by}; no SNAPSHOT row "
                      f"'{name}' is written", stacklevel=3)
        return
    attrs = _snapshot_attrs()
    if mask is not None:
        attrs += ",device_mask:" + str(mask)
    _ext.event(_ext.EV["SNAPSHOT"], _ext.T["SNAPSHOT"], _ext.DEV["CPU"], -1, 0, 0, 0, 0, name, attrs)
    # CUDA mode: the cuda collector's rows with the caching allocator's numbers
    _cuda.take_snapshot(mask, name)


_OP = dis.opmap
_WITH_OPS = {_OP[n] for n in ("BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH") if n in _OP}
_SKIP_OPS = {_OP[n] for n in ("CACHE", "PRECALL", "EXTENDED_ARG") if n in _OP}
_MAKE_FUNCTION = _OP.get("MAKE_FUNCTION", -1)


def _call_site_is_scope(depth: int = 2) -> bool:
    """True when the caller uses our return value as a context manager
    (``with take_snapshot(...):``) or a decorator (``@take_snapshot(...)``):
    looks at the caller's next bytecode instructions (no calls into dis, so
    nothing shows in the Python trace)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code, i = frame.f_code.co_code, frame.f_lasti + 2
    seen = []
    while i + 1 < len(code) and len(seen) < 6:
        op = code[i]
        i += 2
        if op in _SKIP_OPS:
            continue
        seen.append(op)
    if not seen:
        return False
    if seen[0] in _WITH_OPS:
        return True
    # decorator: the decorated function is built right after our call
    return _MAKE_FUNCTION in seen[:4] and seen[0] in (_OP.get("LOAD_CONST"), _OP.get("LOAD_CLOSURE"),
                                                       _OP.get("BUILD_TUPLE"))


class _ContextDecorator:
    """A context manager that also decorates: the function runs inside it.
    `_API` names the public function or class in error messages."""

    _API = ""

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"msmemscope.{self._API}: as a decorator it wraps a function, got "
                            f"{type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return wrapper


def _check_name(api: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"msmemscope.{api}: 'name' must be a string, got {type(name).__name__}")
    if not name or "\n" in name:
        raise ValueError(f"msmemscope.{api}: 'name' must be a non-empty single-line string")
    _check_text(f"msmemscope.{api}", "name", name)
    return name


class TakeSnapshot(_ContextDecorator):
    """Memory snapshots around a block of code, as upstream's class: as a
    context manager or a decorator it writes a SNAPSHOT row "<name> Start"
    on entry and "<name> End" on exit.

        with msmemscope.TakeSnapshot(0, "forward_pass"):
            output = model(input_data)

        @msmemscope.TakeSnapshot(name="forward_pass")
        def forward_pass(data): ...

    ``device_mask``: None (all devices), a device id, or a list/tuple of ids.
    """

    _API = "TakeSnapshot"

    def __init__(self, device_mask: Union[None, int, Sequence[int]] = None, name: str = "Memory Snapshot") -> None:
        self.mask = _check_mask(device_mask, self._API)
        self.name = _check_name(self._API, name)

    def __enter__(self) -> "TakeSnapshot":
        _emit_snapshot(self.name + " Start", self.mask, "msmemscope.TakeSnapshot")
        return self

    def __exit__(self, *exc) -> None:
        _emit_snapshot(self.name + " End", self.mask, "msmemscope.TakeSnapshot")


def take_snapshot(device_mask: Union[None, int, Sequence[int]] = None, name: str = "Memory Snapshot") -> TakeSnapshot:
    """Writes a SNAPSHOT row now, also outside start()/stop() (a first call
    opens the session with the config() values set so far: config() comes
    first): upstream's
    Attr keys (reserved, max_reserved, allocated, max_allocated, total, free,
    device_rate, reserved_rate; on cpu the PyTorch CPU pool and the OS's
    total/free memory), then this process's rss and peak_rss.

    ``device_mask``: None (all devices), a device id, or a list/tuple of ids.
    ``name``: the row's Name. Used as ``with take_snapshot(name="x"):`` or
    ``@take_snapshot(name="x")`` it writes "x Start" and "x End" instead
    (the same as ``TakeSnapshot``).
    """
    mask = _check_mask(device_mask, "take_snapshot")
    _check_name("take_snapshot", name)
    snap = TakeSnapshot.__new__(TakeSnapshot)
    snap.mask, snap.name = mask, name
    if not _call_site_is_scope():
        _emit_snapshot(name, mask, "msmemscope.take_snapshot()")
    return snap


# ---------------------------------------------------------------- RecordFunction
class RecordFunction(_ContextDecorator):
    """A named span in the Python trace file (python_trace_{ts}.csv), as a
    context manager or a decorator:

        with msmemscope.RecordFunction("forward_pass"):
            out = model(x)

        @msmemscope.RecordFunction("forward_pass")
        def forward_pass(x): ...

    Recorded while collection is on (or tracer.start() is active).
    """

    _API = "RecordFunction"

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"msmemscope.RecordFunction: 'name' must be a string, got {type(name).__name__}")
        if not name or "\n" in name:
            raise ValueError("msmemscope.RecordFunction: 'name' must be a non-empty single-line string")
        _check_text("msmemscope.RecordFunction", "name", name)
        self.name = name
        self._starts: List[int] = []

    def __enter__(self) -> "RecordFunction":
        self._starts.append(_ext.now() if _ext.agent_loaded() else 0)
        return self

    def __exit__(self, *exc) -> None:
        start = self._starts.pop() if self._starts else 0
        if start and _ext.attached() and (_ext.collecting() or _collect.trace_on()):
            _ext.event(_ext.EV["PY_TRACE"], _ext.T["PY_RECORD_FUNCTION"], _ext.DEV["NA"], -1, 0, 0, start, 0,
                       self.name, "")
